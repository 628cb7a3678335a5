"""A small MLP classifier on synthetic data: the simplest training loop.

    python examples/mlp.py --steps 20
    daydream trace examples/mlp.py -- --steps 20

Runs on a GPU when one is available, on the CPU otherwise. No profiler code.
"""

import argparse

import torch
import torch.utils.checkpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


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
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--checkpoint", action="store_true", help="recompute each block's activations in backward")
    parser.add_argument("--optimizer-impl", choices=["default", "for-loop", "foreach"], default="default")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    data = TensorDataset(torch.randn(args.steps * args.batch_size, 256), torch.randint(0, 10, (args.steps * args.batch_size,)))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True)
    model = MLP(checkpoint=args.checkpoint).to(device)
    foreach = {"default": None, "for-loop": False, "foreach": True}[args.optimizer_impl]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=foreach)
    loss_fn = nn.CrossEntropyLoss()
    for step, (features, labels) in enumerate(loader):
        features, labels = features.to(device), labels.to(device)
        loss = loss_fn(model(features), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
