r"""A small ConvNeXt image classifier trained with AdamW, gradient clipping and a cosine schedule: a training script
written apart from the examples' shared loop (examples/training.py), as a user's own script is, that takes the flags
`scripts/whatif_truth.py --script` runs its variants with (--device, --steps, --batch-size, --optim loop|foreach,
--amp, --checkpoint, --compile).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/convnext.py \
        --script-args "--batch-size 16" --checkpoint-layers 'stages\.\d+\.\d+$' --rounds 3

A patchify stem (4x4 convolution, stride 4), four stages of ConvNeXt blocks (a 7x7 depthwise convolution, a layer norm
over the channels of the image permuted channels-last, a 4x pointwise MLP with GELU as two linear layers, a learned
per-channel layer scale, stochastic depth drawn per sample, and the residual add), a layer norm and a 2x2 strided
convolution between stages, global average pooling and a linear head. Cross entropy with label smoothing, AdamW with
weight decay (`--optim loop`: foreach=False, the default; `foreach`: foreach=True), the gradients clipped by their
global norm, a cosine schedule; random 64x64 images made in the loop. On the CPU only (--device is taken and ignored).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class ChannelsNorm(nn.Module):
    """A layer norm over the channels of an NCHW image."""

    def __init__(self, channels):
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=1e-6)

    def forward(self, x):
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Block(nn.Module):
    def __init__(self, dim, drop_path):
        super().__init__()
        self.depthwise = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.expand = nn.Linear(dim, 4 * dim)
        self.project = nn.Linear(4 * dim, dim)
        self.scale = nn.Parameter(torch.full((dim,), 1e-6))
        self.drop_path = drop_path

    def forward(self, x):
        y = self.depthwise(x).permute(0, 2, 3, 1)
        y = self.project(F.gelu(self.expand(self.norm(y))))
        y = (self.scale * y).permute(0, 3, 1, 2)
        if self.training and self.drop_path > 0:
            keep = torch.rand(x.shape[0], 1, 1, 1, dtype=y.dtype) >= self.drop_path
            y = y * keep / (1 - self.drop_path)
        return x + y


class ConvNeXt(nn.Module):
    def __init__(self, depths=(2, 2, 4, 2), dims=(48, 96, 192, 384), classes=100, drop_path=0.1, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4), ChannelsNorm(dims[0]))
        self.downsample = nn.ModuleList(
            nn.Sequential(ChannelsNorm(dims[i]), nn.Conv2d(dims[i], dims[i + 1], 2, stride=2))
            for i in range(len(dims) - 1))
        rates = torch.linspace(0, drop_path, sum(depths)).tolist()
        self.stages = nn.ModuleList()
        for i, (depth, dim) in enumerate(zip(depths, dims)):
            first = sum(depths[:i])
            self.stages.append(nn.Sequential(*[Block(dim, rates[first + j]) for j in range(depth)]))
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x):
        x = self.stem(x)
        for i, stage in enumerate(self.stages):
            if i > 0:
                x = self.downsample[i - 1](x)
            for block in stage:
                x = checkpoint(block, x, use_reentrant=False) if self.use_checkpoint else block(x)
        return self.head(self.norm(x.mean((2, 3))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--size", type=int, default=64)
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
    model = ConvNeXt(use_checkpoint=a.checkpoint)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, foreach=a.optim == "foreach")
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.steps)
    step_model = torch.compile(model) if a.compile else model
    model.train()
    for _ in range(a.steps):
        x = torch.randn(a.batch_size, 3, a.size, a.size)
        y = torch.randint(0, 100, (a.batch_size,))
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
            loss = F.cross_entropy(step_model(x), y, label_smoothing=0.1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()


if __name__ == "__main__":
    main()
