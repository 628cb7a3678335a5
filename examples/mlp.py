"""A small MLP classifier on synthetic data: the simplest training loop.

    python examples/mlp.py --steps 20
    daydream trace examples/mlp.py -- --steps 20
    torchrun --nproc-per-node 2 examples/mlp.py --ddp --threads 1

Runs on a GPU when one is available, on the CPU otherwise. No profiler code.

With --ddp, launched by torchrun (or with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
set), each process is one rank of DistributedDataParallel (gloo on the CPU, nccl on GPUs):
every rank trains on its own --batch-size samples per step and gradients are averaged.
"""

import os
import sys

import torch
import torch.utils.checkpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the shared loop beside this script, however it is run
import training  # noqa: E402


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.linear(x)))


class MLP(nn.Module):
    def __init__(self, features: int = 256, hidden: int = 512, depth: int = 3, classes: int = 10,
                 checkpoint: bool = False) -> None:
        super().__init__()
        self.embed = nn.Linear(features, hidden)
        self.blocks = nn.ModuleList(Block(hidden) for _ in range(depth))
        self.head = nn.Linear(hidden, classes)
        self.checkpoint = checkpoint

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if self.checkpoint else block(x)
        return self.head(x)


def main() -> None:
    parser = training.options(__doc__.splitlines()[0], batch_size=64)
    parser.add_argument("--samples", type=int, default=1024, help="samples in the in-memory dataset (cycled through)")
    parser.add_argument("--width", type=int, default=512, help="hidden size")
    args = parser.parse_args()
    device, _ = training.setup(args)
    if args.samples < args.batch_size:
        raise SystemExit(f"--samples {args.samples} is smaller than one batch of {args.batch_size}")
    data = TensorDataset(torch.randn(args.samples, 256), torch.randint(0, 10, (args.samples,)))
    batches = list(DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True))
    model = training.wrap(MLP(hidden=args.width, checkpoint=args.checkpoint).to(device), args)
    optimizer = training.optimizer(torch.optim.Adam, model, args, lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    training.train(model, lambda step: tuple(t.to(device) for t in batches[step % len(batches)]),
                   lambda model, batch: loss_fn(model(batch[0]), batch[1]), optimizer, args, device)


if __name__ == "__main__":
    main()
