"""A small convolutional network (CIFAR-sized images, synthetic data) trained with SGD.

    python examples/cnn.py --steps 20
    daydream trace examples/cnn.py -- --steps 20

Runs on a GPU when one is available, on the CPU otherwise. No profiler code.
"""

import argparse

import torch
import torch.utils.checkpoint
from torch import nn


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
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--checkpoint", action="store_true", help="recompute each block's activations in backward")
    parser.add_argument("--optimizer-impl", choices=["default", "for-loop", "foreach"], default="default")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = SmallCNN(checkpoint=args.checkpoint).to(device)
    foreach = {"default": None, "for-loop": False, "foreach": True}[args.optimizer_impl]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=foreach)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        images = torch.randn(args.batch_size, 3, 32, 32, device=device)
        labels = torch.randint(0, 10, (args.batch_size,), device=device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
