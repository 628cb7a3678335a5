r"""Contrastive learning of a feature encoder (SimCLR's NT-Xent loss) on random features: a training script written apart
from the examples' shared loop (examples/training.py), as a user's own script is, that takes the flags
`scripts/whatif_truth.py --script` runs its variants with (--device, --steps, --batch-size, --optim loop|foreach, --amp,
--checkpoint, --compile).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/simclr.py \
        --script-args "--batch-size 512" --checkpoint-layers 'blocks\.\d+$' --rounds 5

Each step draws a batch of feature vectors and makes two views of it (Gaussian noise and a random feature mask); a
residual MLP encoder and a projection head embed both; the loss compares every embedding with every other one: the
2B × 2B matrix of cosine similarities over a temperature, the self-similarities masked out, cross entropy against each
embedding's other view. So the loss's work grows with the square of the batch, the encoder's linearly. AdamW (`--optim
loop`: foreach=False, the default; `foreach`: foreach=True). On the CPU only (--device is taken and ignored).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Encoder(nn.Module):
    def __init__(self, features=128, dim=128, hidden=256, depth=2, out=128, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.stem = nn.Linear(features, dim)
        self.blocks = nn.ModuleList(Block(dim, hidden) for _ in range(depth))
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, out))

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.use_checkpoint else block(x)
        return self.head(x)


def nt_xent(z, temperature):
    """SimCLR's loss over 2B embeddings, the first B and the last B two views of the same samples."""
    z = F.normalize(z.float(), dim=-1)
    count = z.shape[0] // 2
    similarity = z @ z.t() / temperature
    self_pairs = torch.eye(z.shape[0], dtype=torch.bool)
    similarity = similarity.masked_fill(self_pairs, float("-inf"))
    targets = torch.cat([torch.arange(count, 2 * count), torch.arange(0, count)])
    return F.cross_entropy(similarity, targets)


def views(x):
    """Two noisy, partly masked views of each sample."""
    first = (x + 0.1 * torch.randn_like(x)) * (torch.rand_like(x) > 0.2)
    second = (x + 0.1 * torch.randn_like(x)) * (torch.rand_like(x) > 0.2)
    return torch.cat([first, second])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--optim", default="loop")
    p.add_argument("--amp", nargs="?", const="bf16", default=None)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Encoder(features=a.features, use_checkpoint=a.checkpoint)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4, foreach=a.optim == "foreach")
    step_model = torch.compile(model) if a.compile else model
    model.train()
    for _ in range(a.steps):
        x = torch.randn(a.batch_size, a.features)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
            z = step_model(views(x))
            loss = nt_xent(z, temperature=0.2)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
