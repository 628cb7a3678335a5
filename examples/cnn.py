"""A small convolutional network (CIFAR-sized images, synthetic data) trained with SGD.

    python examples/cnn.py --steps 20
    daydream trace examples/cnn.py -- --steps 20
    torchrun --nproc-per-node 2 examples/cnn.py --ddp --threads 1

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the shared loop beside this script, however it is run
import training  # noqa: E402


class ConvBlock(nn.Module):
    def __init__(self, channels_in: int, channels_out: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels_in, channels_out, kernel_size=3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels_out)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.relu(self.bn(self.conv(x))))


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10, checkpoint: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([ConvBlock(3, 16), ConvBlock(16, 32), ConvBlock(32, 64)])
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(64 * 4 * 4, classes)
        self.checkpoint = checkpoint

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if self.checkpoint else block(x)
        return self.classifier(self.flatten(x))


def main() -> None:
    args = training.options(__doc__.splitlines()[0], batch_size=32).parse_args()
    device, _ = training.setup(args)
    model = training.wrap(SmallCNN(checkpoint=args.checkpoint).to(device), args)
    optimizer = training.optimizer(torch.optim.SGD, model, args, lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.randn(args.batch_size, 3, 32, 32, device=device), torch.randint(0, 10, (args.batch_size,), device=device))

    training.train(model, batch, lambda model, batch: loss_fn(model(batch[0]), batch[1]), optimizer, args, device)


if __name__ == "__main__":
    main()
