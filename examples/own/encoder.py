r"""A text classifier on PyTorch's own nn.TransformerEncoderLayer, trained from a DataLoader with AdamW and a one-cycle
schedule: a training script written apart from the examples' shared loop (examples/training.py), as a user's own script
is, that takes the flags `scripts/whatif_truth.py --script` runs its variants with (--device, --steps, --batch-size,
--optim loop|foreach, --amp, --checkpoint, --compile).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/encoder.py \
        --script-args "--batch-size 16" --checkpoint-layers 'layers\.\d+$' --rounds 3

Token and learned position embeddings, four post-norm encoder layers (GELU, dropout, a padding mask from the
sequences' lengths), mean pooling over the tokens that are not padding and a linear head; cross entropy with label
smoothing, AdamW with weight decay (`--optim loop`: foreach=False, the default; `foreach`: foreach=True) under
OneCycleLR, batches shuffled by a DataLoader over a TensorDataset in this process. On the CPU only (--device is taken
and ignored).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset


class Classifier(nn.Module):
    def __init__(self, vocab=8000, dim=256, heads=4, layers=4, length=128, classes=20, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.tokens = nn.Embedding(vocab, dim, padding_idx=0)
        self.positions = nn.Parameter(torch.zeros(1, length, dim))
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, heads, dim_feedforward=4 * dim, dropout=0.1, activation="gelu",
                                       batch_first=True)
            for _ in range(layers))
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens):
        padding = tokens == 0
        x = self.tokens(tokens) + self.positions[:, :tokens.shape[1]]
        for layer in self.layers:
            if self.use_checkpoint:
                x = checkpoint(layer, x, src_key_padding_mask=padding, use_reentrant=False)
            else:
                x = layer(x, src_key_padding_mask=padding)
        keep = (~padding).unsqueeze(-1).to(x.dtype)
        return self.head((x * keep).sum(1) / keep.sum(1).clamp(min=1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--optim", default="loop")
    p.add_argument("--amp", nargs="?", const="bf16", default=None)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Classifier(length=a.length, use_checkpoint=a.checkpoint)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, foreach=a.optim == "foreach")
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=a.steps)
    step_model = torch.compile(model) if a.compile else model
    samples = 8 * a.batch_size
    lengths = torch.randint(a.length // 2, a.length + 1, (samples,))
    tokens = torch.randint(1, 8000, (samples, a.length))
    tokens[torch.arange(a.length) >= lengths.unsqueeze(1)] = 0
    data = TensorDataset(tokens, torch.randint(0, 20, (samples,)))
    loader = DataLoader(data, batch_size=a.batch_size, shuffle=True, drop_last=True)
    batches = iter(loader)
    model.train()
    for _ in range(a.steps):
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
            loss = F.cross_entropy(step_model(x), y, label_smoothing=0.1)
        loss.backward()
        opt.step()
        schedule.step()


if __name__ == "__main__":
    main()
