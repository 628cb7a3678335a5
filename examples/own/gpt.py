r"""A small GPT-style language model on random tokens: a training script written apart from the examples' shared loop
(examples/training.py), as a user's own script is, that takes the flags `scripts/whatif_truth.py --script` runs its
variants with (--device, --steps, --batch-size, --optim loop|foreach, --amp, --checkpoint, --compile).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/gpt.py \
        --script-args "--batch-size 8" --checkpoint-layers 'blocks\.\d+$' --rounds 5

Token embeddings tied to the output head, RMSNorm, causal attention through F.scaled_dot_product_attention with rotary
positions, a SwiGLU MLP; two micro-batches accumulated per optimizer step, gradients clipped by their global norm,
AdamW. On the CPU only (--device is taken and ignored).
"""
import argparse
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = nn.RMSNorm(dim)
        hidden = 8 * dim // 3
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (rotate(q.transpose(1, 2), cos, sin), rotate(k.transpose(1, 2), cos, sin), v.transpose(1, 2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class GPT(nn.Module):
    def __init__(self, vocab=2048, dim=192, depth=4, heads=6, context=128, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight
        half = dim // heads // 2
        angles = torch.outer(torch.arange(context).float(), 10000.0 ** (-torch.arange(half).float() / half))
        self.register_buffer("cos", torch.cat([angles.cos()] * 2, dim=-1), persistent=False)
        self.register_buffer("sin", torch.cat([angles.sin()] * 2, dim=-1), persistent=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        cos, sin = self.cos[: tokens.shape[1]], self.sin[: tokens.shape[1]]
        for block in self.blocks:
            x = checkpoint(block, x, cos, sin, use_reentrant=False) if self.use_checkpoint else block(x, cos, sin)
        return self.head(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--accumulate", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--optim", default="default")
    p.add_argument("--amp", nargs="?", const="bf16", default=None)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT(context=a.context, use_checkpoint=a.checkpoint)
    kw = {"loop": {"foreach": False}, "foreach": {"foreach": True}}.get(a.optim, {})
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, **kw)
    step_model = torch.compile(model) if a.compile else model
    data = torch.randint(0, 2048, (a.accumulate, a.batch_size, a.context + 1))
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        for micro in data:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
                logits = step_model(micro[:, :-1])
                loss = F.cross_entropy(logits.flatten(0, 1), micro[:, 1:].flatten()) / a.accumulate
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


if __name__ == "__main__":
    main()
