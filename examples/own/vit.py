r"""A small vision transformer trained on random images: a training script written apart from the examples' shared
loop (examples/training.py), as a user's own script is, that takes the flags `scripts/whatif_truth.py --script` runs
its variants with (--device, --steps, --batch-size, --optim loop|foreach, --amp, --checkpoint, --compile), and under
torchrun `--fsdp [--no-reshard]` (FSDP2 over gloo: fully_shard on each of `layers`, then on the model) or `--pp
--microbatches M --schedule 1f1b|gpipe` (torch.distributed.pipelining, two stages: the patches and the first half of
`layers`, then the rest and the head), as `scripts/validate_parallel.py --examples vit` runs it.

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/vit.py \
        --script-args "--batch-size 16" --checkpoint-layers 'layers\.\d+$' --rounds 5

Patches from a strided convolution, a class token and learned positions, pre-norm blocks of nn.MultiheadAttention
(batch_first=True: its projections get a transposed input) and a GELU MLP, each added to the block's input; AdamW;
on the CPU only (--device is taken and ignored).
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, size=32, patch=4, dim=128, depth=4, heads=4, classes=10, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (size // patch) ** 2 + 1, dim))
        self.layers = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False) if self.use_checkpoint else layer(x)
        return self.head(self.norm(x[:, 0]))


class FirstStage(nn.Module):
    """The patches, the class token, the positions and the first `upto` blocks of `vit`."""

    def __init__(self, vit, upto):
        super().__init__()
        self.embed, self.cls, self.pos = vit.embed, vit.cls, vit.pos
        self.layers = nn.ModuleList(vit.layers[:upto])

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for layer in self.layers:
            x = layer(x)
        return x


class LastStage(nn.Module):
    """The blocks of `vit` from `upto` on, the norm and the head."""

    def __init__(self, vit, upto):
        super().__init__()
        self.layers = nn.ModuleList(vit.layers[upto:])
        self.norm, self.head = vit.norm, vit.head

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x[:, 0]))


def train_pipelined(model, images, labels, a):
    """Two stages, a rank each, `a.microbatches` micro-batches per step under `a.schedule`."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank()
    half = len(model.layers) // 2
    stage_module = FirstStage(model, half) if rank == 0 else LastStage(model, half)
    opt = torch.optim.AdamW(stage_module.parameters(), lr=1e-3)
    stage = PipelineStage(stage_module, rank, 2, torch.device("cpu"))
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[a.schedule]
    schedule = kind(stage, a.microbatches, loss_fn=F.cross_entropy)
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            schedule.step(images)
        else:
            schedule.step(target=labels, losses=[])
        opt.step()
    torch.distributed.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--optim", default="default")
    p.add_argument("--amp", nargs="?", const="bf16", default=None)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--fsdp", action="store_true", help="one rank of FSDP2 (launch with torchrun)")
    p.add_argument("--no-reshard", action="store_true", help="with --fsdp: reshard_after_forward=False")
    p.add_argument("--pp", action="store_true", help="one of two pipeline stages (launch with torchrun)")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--schedule", default="1f1b", choices=("1f1b", "gpipe"))
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = ViT(size=a.size, use_checkpoint=a.checkpoint)
    if a.fsdp:
        if "RANK" not in os.environ:
            raise SystemExit("--fsdp: launch with torchrun --nproc-per-node N")
        from torch.distributed.fsdp import fully_shard

        torch.distributed.init_process_group("gloo")
        for layer in model.layers:
            fully_shard(layer, reshard_after_forward=not a.no_reshard)
        fully_shard(model, reshard_after_forward=not a.no_reshard)
    if a.pp:
        if "RANK" not in os.environ or os.environ.get("WORLD_SIZE") != "2":
            raise SystemExit("--pp: launch two ranks with torchrun --nproc-per-node 2")
        images = torch.randn(a.batch_size, 3, a.size, a.size)
        labels = torch.randint(0, 10, (a.batch_size,))
        return train_pipelined(model, images, labels, a)
    kw = {"loop": {"foreach": False}, "foreach": {"foreach": True}}.get(a.optim, {})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **kw)
    step_model = torch.compile(model) if a.compile else model
    images = torch.randn(a.batch_size, 3, a.size, a.size)
    labels = torch.randint(0, 10, (a.batch_size,))
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
            loss = F.cross_entropy(step_model(images), labels)
        loss.backward()
        opt.step()
    if a.fsdp:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
