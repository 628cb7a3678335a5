"""A small decoder-only transformer language model on random tokens, trained with AdamW.

    python examples/transformer.py --steps 20
    daydream trace examples/transformer.py -- --steps 20
    torchrun --nproc-per-node 2 examples/transformer.py --ddp --threads 1
    torchrun --nproc-per-node 2 examples/transformer.py --pp --microbatches 4 --schedule 1f1b --threads 1
    torchrun --nproc-per-node 2 examples/transformer.py --tp --threads 1

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
        if self.embed is None:  # a later pipeline stage: the hidden states of the stage before
            x = tokens
        else:
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.embed(tokens) + self.position(positions)
        for block in self.blocks:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if self.checkpoint else block(x)
        return x if self.head is None else self.head(self.ln_f(x))

    def stage(self, index: int, cuts: list[int]) -> "TinyTransformer":
        """This model as pipeline stage `index` of len(cuts), holding blocks cuts[index] up to the next cut (the
        first stage the embeddings, the last the head); the other blocks become identities, so the names stay."""
        ends = [*cuts[1:], len(self.blocks)]
        for k in range(len(self.blocks)):
            if not cuts[index] <= k < ends[index]:
                self.blocks[k] = nn.Identity()
        if index > 0:
            self.embed = self.position = None
        if index < len(cuts) - 1:
            self.ln_f = self.head = None
        return self


def main() -> None:
    parser = training.options(__doc__.splitlines()[0], batch_size=8)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--depth", type=int, default=2, help="transformer blocks")
    parser.add_argument("--width", type=int, default=256, help="hidden size")
    args = parser.parse_args()
    device, rank = training.setup(args)
    model = TinyTransformer(width=args.width, context=args.context, depth=args.depth, checkpoint=args.checkpoint)
    if args.pp:
        model = model.stage(rank, training.stage_cuts(args, args.depth, torch.distributed.get_world_size()))
    if args.tp:  # Megatron's split: q, k, v and the MLP's up by columns, the projections after them by rows
        degree = torch.distributed.get_world_size()
        plan = {}
        for k, block in enumerate(model.blocks):
            block.attn.core.heads //= degree  # each rank holds whole heads of q, k and v
            plan |= {f"blocks.{k}.attn.qkv": "column", f"blocks.{k}.attn.proj": "row", f"blocks.{k}.mlp.up": "column",
                     f"blocks.{k}.mlp.down": "row"}
        model = training.tensor_parallel(model.to(device), plan, device)
    model = training.wrap(model.to(device), args)
    optimizer = training.optimizer(torch.optim.AdamW, model, args, lr=3e-4)

    def batch(step: int) -> tuple[torch.Tensor]:
        return (torch.randint(0, 1000, (args.batch_size, args.context + 1), device=device),)

    def loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        tokens = batch[0]
        logits = model(tokens[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))

    if args.pp:
        pipelined = training.Pipelined(inputs=lambda batch: (batch[0][:, :-1],), target=lambda batch: batch[0][:, 1:],
                                       loss=lambda logits, target: nn.functional.cross_entropy(
                                           logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1)))
        training.train_pipelined(model, pipelined, batch, optimizer, args, device)
        return
    training.train(model, batch, loss, optimizer, args, device)


if __name__ == "__main__":
    main()
