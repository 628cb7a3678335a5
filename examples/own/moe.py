r"""A small mixture-of-experts language model on random tokens: a training script written apart from the examples'
shared loop (examples/training.py), as a user's own script is, that takes the flags `scripts/whatif_truth.py --script`
runs its variants with (--device, --steps, --batch-size, --optim loop|foreach, --amp, --checkpoint, --compile).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/moe.py \
        --script-args "--batch-size 8" --checkpoint-layers 'blocks\.\d+$' --rounds 5

Token and learned position embeddings; pre-norm blocks of nn.MultiheadAttention (causal mask) and a mixture of four
expert MLPs, each token routed to its top two by a linear router (softmax gates renormalised over the two), the tokens
of each expert gathered by index, run through it and added back weighted by their gate with index_add_; a
load-balancing loss beside the language model's cross entropy. Two micro-batches accumulated per optimizer step,
gradients clipped by their global norm, Adam (`--optim loop`: foreach=False, the default; `foreach`: foreach=True).
How many tokens each expert gets moves from step to step, so its ops' shapes do too. On the CPU only (--device is taken
and ignored).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Experts(nn.Module):
    def __init__(self, dim, hidden, count, top):
        super().__init__()
        self.top = top
        self.router = nn.Linear(dim, count, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)) for _ in range(count))

    def forward(self, x):
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        probabilities = F.softmax(self.router(tokens).float(), dim=-1)
        gates, chosen = probabilities.topk(self.top, dim=-1)
        gates = gates / gates.sum(-1, keepdim=True)
        out = torch.zeros_like(tokens)
        for index, expert in enumerate(self.experts):
            rows, slot = (chosen == index).nonzero(as_tuple=True)
            if rows.numel():
                update = expert(tokens[rows]) * gates[rows, slot].unsqueeze(-1).to(tokens.dtype)
                out = out.index_add(0, rows, update.to(out.dtype))
        # the share of tokens each expert got times its mean probability (Switch Transformer's balance loss)
        share = F.one_hot(chosen[:, 0], len(self.experts)).float().mean(0)
        balance = len(self.experts) * (share * probabilities.mean(0)).sum()
        return out.reshape(shape), balance


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, experts, top):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.moe = Experts(dim, hidden, experts, top)

    def forward(self, x, mask):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, attn_mask=mask, need_weights=False)[0]
        update, balance = self.moe(self.norm2(x))
        return x + update, balance


class Model(nn.Module):
    def __init__(self, vocabulary=1000, context=64, dim=128, heads=4, hidden=256, depth=2, experts=4, top=2,
                 use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.embed = nn.Embedding(vocabulary, dim)
        self.position = nn.Parameter(torch.randn(context, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, hidden, experts, top) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocabulary, bias=False)

    def forward(self, tokens):
        length = tokens.shape[1]
        mask = torch.triu(torch.full((length, length), float("-inf")), diagonal=1)
        x = self.embed(tokens) + self.position[:length]
        balance = 0.0
        for block in self.blocks:
            x, extra = checkpoint(block, x, mask, use_reentrant=False) if self.use_checkpoint else block(x, mask)
            balance = balance + extra
        return self.head(self.norm(x)), balance


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--accumulate", type=int, default=2)
    p.add_argument("--optim", default="loop")
    p.add_argument("--amp", nargs="?", const="bf16", default=None)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Model(context=a.context, use_checkpoint=a.checkpoint)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4, foreach=a.optim == "foreach")
    step_model = torch.compile(model) if a.compile else model
    model.train()
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        for _ in range(a.accumulate):
            tokens = torch.randint(0, 1000, (a.batch_size, a.context + 1))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
                logits, balance = step_model(tokens[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))
                loss = (loss + 0.01 * balance) / a.accumulate
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


if __name__ == "__main__":
    main()
