r"""A BERT-style sentence classifier on random tokens: a training script written apart from the examples' shared loop
(examples/training.py), as a user's own script is, that takes the flags `scripts/whatif_truth.py --script` runs its
variants with (--device, --steps, --batch-size, --optim loop|foreach, --amp, --checkpoint, --compile) and --width.

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/bert_cls.py \
        --script-args "--batch-size 16 --width 128" --checkpoint-layers 'layers\.\d+$' --whatifs width --rounds 5

Token, position and segment embeddings summed and layer-normed, PyTorch's own `nn.TransformerEncoderLayer` (post-norm,
GELU, dropout; its attention packs q, k and v in one projection) over a padding mask, a pooler (a linear and tanh on
the first token, as BERT's), dropout and a linear classifier; AdamW with weight decay, gradients clipped by their global
norm, a linear warm-up. On the CPU only (--device is taken and ignored).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Classifier(nn.Module):
    def __init__(self, width, vocab=4096, length=96, depth=3, heads=4, classes=5, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.tokens = nn.Embedding(vocab, width, padding_idx=0)
        self.positions = nn.Embedding(length, width)
        self.segments = nn.Embedding(2, width)
        self.norm = nn.LayerNorm(width)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.1, activation="gelu", batch_first=True)
            for _ in range(depth))
        self.pooler = nn.Linear(width, width)
        self.dropout = nn.Dropout(0.1)
        self.classify = nn.Linear(width, classes)

    def forward(self, tokens, segments):
        positions = torch.arange(tokens.shape[1]).unsqueeze(0)
        x = self.norm(self.tokens(tokens) + self.positions(positions) + self.segments(segments))
        padding = tokens == 0
        for layer in self.layers:
            if self.use_checkpoint:
                x = checkpoint(layer, x, None, padding, use_reentrant=False)
            else:
                x = layer(x, src_key_padding_mask=padding)
        return self.classify(self.dropout(torch.tanh(self.pooler(x[:, 0]))))


def batches(count, batch, length, vocab=4096, classes=5):
    """Random sentences of two segments, padded to `length` from a random point on."""
    generator = torch.Generator().manual_seed(0)
    found = []
    for _ in range(count):
        tokens = torch.randint(1, vocab, (batch, length), generator=generator)
        lengths = torch.randint(length // 2, length + 1, (batch,), generator=generator)
        tokens[torch.arange(length).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
        split = torch.randint(4, length // 2, (batch, 1), generator=generator)
        segments = (torch.arange(length).unsqueeze(0) >= split).long()
        found.append((tokens, segments, torch.randint(0, classes, (batch,), generator=generator)))
    return found


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--length", type=int, default=96)
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
    model = Classifier(a.width, length=a.length, use_checkpoint=a.checkpoint)
    kw = {"loop": {"foreach": False}, "foreach": {"foreach": True}}.get(a.optim, {})
    decay = [q for n, q in model.named_parameters() if q.dim() > 1]
    rest = [q for n, q in model.named_parameters() if q.dim() <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=2e-4, **kw)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 10))
    step_model = torch.compile(model) if a.compile else model
    data = batches(4, a.batch_size, a.length)
    model.train()
    for step in range(a.steps):
        tokens, segments, labels = data[step % len(data)]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
            loss = F.cross_entropy(step_model(tokens, segments), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()


if __name__ == "__main__":
    main()
