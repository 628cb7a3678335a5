"""A small MLP classifier on synthetic data: the simplest training loop.

    python examples/mlp.py --steps 20
    daydream trace examples/mlp.py -- --steps 20

Runs on a GPU when one is available, on the CPU otherwise. No profiler code.
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class MLP(nn.Module):
    def __init__(self, features: int = 256, hidden: int = 512, classes: int = 10) -> None:
        super().__init__()
        self.hidden1 = nn.Linear(features, hidden)
        self.act1 = nn.ReLU()
        self.hidden2 = nn.Linear(hidden, hidden)
        self.act2 = nn.ReLU()
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.act2(self.hidden2(self.act1(self.hidden1(x))))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    data = TensorDataset(torch.randn(args.steps * args.batch_size, 256), torch.randint(0, 10, (args.steps * args.batch_size,)))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True)
    model = MLP().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
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
