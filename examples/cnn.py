"""A small convolutional network (CIFAR-sized images, synthetic data) trained with SGD.

    python examples/cnn.py --steps 20
    daydream trace examples/cnn.py -- --steps 20
    torchrun --nproc-per-node 2 examples/cnn.py --ddp --threads 1

Runs on a GPU when one is available, on the CPU otherwise. No profiler code.

With --ddp, launched by torchrun (or with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
set), each process is one rank of DistributedDataParallel (gloo on the CPU, nccl on GPUs):
every rank trains on its own --batch-size samples per step and gradients are averaged.
"""

import argparse
import os

import torch
import torch.distributed
import torch.utils.checkpoint
from torch import nn
from torch.nn.parallel import DistributedDataParallel


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


def join_process_group(device: str) -> int:
    """Join the process group torch.distributed's environment variables describe; returns this process's rank."""
    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        raise SystemExit(f"--ddp: {', '.join(missing)} not set — launch with torchrun --nproc-per-node N ... --ddp")
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return torch.distributed.get_rank()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--checkpoint", action="store_true", help="recompute each block's activations in backward")
    parser.add_argument("--optimizer-impl", choices=["default", "for-loop", "foreach"], default="default")
    parser.add_argument("--ddp", action="store_true", help="one rank of DistributedDataParallel (launch with torchrun)")
    parser.add_argument("--threads", type=int, default=0, help="intra-op CPU threads (torch.set_num_threads); 0: torch's default")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.ddp and device == "cuda":
        device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
    rank = join_process_group(device) if args.ddp else 0
    torch.manual_seed(rank)  # each rank its own data; DDP copies rank 0's initial weights to all
    model = SmallCNN(checkpoint=args.checkpoint).to(device)
    if args.ddp:
        model = DistributedDataParallel(model)
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
    if args.ddp:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
