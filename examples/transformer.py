"""A small decoder-only transformer language model on random tokens, trained with AdamW.

    python examples/transformer.py --steps 20
    daydream trace examples/transformer.py -- --steps 20
    torchrun --nproc-per-node 2 examples/transformer.py --ddp --threads 1

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


class CausalAttention(nn.Module):
    """Multi-head softmax(q k^T / sqrt(d)) v with a causal mask, from packed q, k, v."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads = heads

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        batch, length, packed = qkv.shape
        width = packed // 3
        q, k, v = qkv.view(batch, length, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(batch, length, width)


class Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.core = CausalAttention(heads)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.core(self.qkv(x)))


class MLP(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = MLP(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 1000, width: int = 256, heads: int = 4, depth: int = 2, context: int = 64,
                 checkpoint: bool = False) -> None:
        super().__init__()
        self.checkpoint = checkpoint
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        for block in self.blocks:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if self.checkpoint else block(x)
        return self.head(self.ln_f(x))


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
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--context", type=int, default=64)
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
    model = TinyTransformer(context=args.context, checkpoint=args.checkpoint).to(device)
    if args.ddp:
        model = DistributedDataParallel(model)
    foreach = {"default": None, "for-loop": False, "foreach": True}[args.optimizer_impl]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=foreach)
    for step in range(args.steps):
        tokens = torch.randint(0, 1000, (args.batch_size, args.context + 1), device=device)
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    if args.ddp:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
