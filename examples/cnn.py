"""A small convolutional network (CIFAR-sized images, synthetic data) trained with SGD.

    python examples/cnn.py --steps 20
    daydream trace examples/cnn.py -- --steps 20
    torchrun --nproc-per-node 2 examples/cnn.py --ddp --threads 1
    python examples/cnn.py --gist       # each block's ReLU and pool keep what Gist's binarize keeps

Runs on a GPU when one is available, on the CPU otherwise. No profiler code.

With --ddp, launched by torchrun (or with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
set), each process is one rank of DistributedDataParallel (gloo on the CPU, nccl on GPUs):
every rank trains on its own --batch-size samples per step and gradients are averaged.
"""

import os
import sys

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the shared loop beside this script, however it is run
import training  # noqa: E402


class GistReLUPool(torch.autograd.Function):
    """ReLU then a 2x2 max pool, keeping for backward what Gist's binarize keeps (Jain et al., ISCA 2018): one bit per
    ReLU output (its sign) and the pool's argmax, not the ReLU's output. Encoding and decoding go tile by tile, as a
    fused kernel would, so that neither holds a full-size temporary."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        y = torch.relu(x)
        out, where = F.max_pool2d(y, 2, return_indices=True)
        ctx.shape = y.shape
        ctx.save_for_backward(_pack(y), where)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        bits, where = ctx.saved_tensors
        grad_y = F.max_unpool2d(grad, where, 2, output_size=ctx.shape[-2:])
        flat = grad_y.view(-1)
        for start in range(0, flat.numel(), TILE):
            tile = bits[start // 8:(start + TILE) // 8]
            flat[start:start + TILE].mul_(((tile.unsqueeze(1) & _BIT.to(tile.device)) != 0).view(-1))
        return grad_y


#: Elements encoded or decoded at a time (a multiple of 8).
TILE = 2**14
_BIT = 2 ** torch.arange(8, dtype=torch.uint8)


def _pack(y: torch.Tensor) -> torch.Tensor:
    """One bit per element of `y` (its size a multiple of 8): set where it is positive."""
    flat = y.reshape(-1)
    bits = torch.empty(flat.numel() // 8, dtype=torch.uint8, device=y.device)
    for start in range(0, flat.numel(), TILE):
        tile = (flat[start:start + TILE] > 0).view(-1, 8).to(torch.uint8) * _BIT.to(y.device)
        bits[start // 8:(start + TILE) // 8] = tile.sum(1, dtype=torch.uint8)
    return bits


class ConvBlock(nn.Module):
    def __init__(self, channels_in: int, channels_out: int, gist: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels_in, channels_out, kernel_size=3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels_out)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.gist = gist

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gist:
            return GistReLUPool.apply(self.bn(self.conv(x)))
        return self.pool(self.relu(self.bn(self.conv(x))))


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10, checkpoint: bool = False, gist: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([ConvBlock(3, 16, gist), ConvBlock(16, 32, gist), ConvBlock(32, 64, gist)])
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(64 * 4 * 4, classes)
        self.checkpoint = checkpoint

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if self.checkpoint else block(x)
        return self.classifier(self.flatten(x))


def main() -> None:
    parser = training.options(__doc__.splitlines()[0], batch_size=32)
    parser.add_argument("--gist", action="store_true", help="keep one bit per ReLU output for backward (Gist's binarize)")
    args = parser.parse_args()
    device, _ = training.setup(args)
    model = training.wrap(SmallCNN(checkpoint=args.checkpoint, gist=args.gist).to(device), args)
    optimizer = training.optimizer(torch.optim.SGD, model, args, lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.randn(args.batch_size, 3, 32, 32, device=device), torch.randint(0, 10, (args.batch_size,), device=device))

    training.train(model, batch, lambda model, batch: loss_fn(model(batch[0]), batch[1]), optimizer, args, device)


if __name__ == "__main__":
    main()
