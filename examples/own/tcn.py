r"""A temporal convolution network trained on random sequences: a training script written apart from the examples'
shared loop (examples/training.py), as a user's own script is, that takes the flags `scripts/whatif_truth.py --script`
runs its variants with (--device, --steps, --batch-size, --optim loop|foreach, --amp, --checkpoint, --compile).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/tcn.py \
        --script-args "--batch-size 16" --checkpoint-layers 'levels\.\d+$' --rounds 3

Residual levels of two dilated causal Conv1d layers (left padding, dilation doubling per level) with BatchNorm1d,
ReLU and dropout, a 1x1 convolution where the width changes, global average pooling and a linear head; SGD with
Nesterov momentum and weight decay, gradients clipped by their global norm; on the CPU only (--device is taken and
ignored).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Level(nn.Module):
    def __init__(self, cin, cout, dilation, kernel=3, dropout=0.1):
        super().__init__()
        self.pad = (kernel - 1) * dilation
        self.conv1 = nn.Conv1d(cin, cout, kernel, dilation=dilation)
        self.bn1 = nn.BatchNorm1d(cout)
        self.conv2 = nn.Conv1d(cout, cout, kernel, dilation=dilation)
        self.bn2 = nn.BatchNorm1d(cout)
        self.drop = nn.Dropout(dropout)
        self.skip = nn.Conv1d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x):
        h = self.drop(F.relu(self.bn1(self.conv1(F.pad(x, (self.pad, 0))))))
        h = self.drop(F.relu(self.bn2(self.conv2(F.pad(h, (self.pad, 0))))))
        return F.relu(h + self.skip(x))


class TCN(nn.Module):
    def __init__(self, channels=(16, 64, 64, 128, 128), classes=12, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.levels = nn.ModuleList(Level(cin, cout, 2 ** i)
                                    for i, (cin, cout) in enumerate(zip(channels, channels[1:])))
        self.head = nn.Linear(channels[-1], classes)

    def forward(self, x):
        for level in self.levels:
            x = checkpoint(level, x, use_reentrant=False) if self.use_checkpoint else level(x)
        return self.head(x.mean(dim=2))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--length", type=int, default=512)
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
    model = TCN(use_checkpoint=a.checkpoint)
    kw = {"loop": {"foreach": False}, "foreach": {"foreach": True}}.get(a.optim, {})
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4, **kw)
    step_model = torch.compile(model) if a.compile else model
    signals = torch.randn(a.batch_size, 16, a.length)
    labels = torch.randint(0, 12, (a.batch_size,))
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
            loss = F.cross_entropy(step_model(signals), labels)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


if __name__ == "__main__":
    main()
