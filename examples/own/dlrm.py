r"""A click-through recommender in the manner of DLRM: a training script written apart from the examples' shared loop
(examples/training.py), as a user's own script is, that takes the flags `scripts/whatif_truth.py --script` runs its
variants with (--device, --steps, --batch-size, --optim loop|foreach, --amp, --checkpoint, --compile).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/dlrm.py \
        --script-args "--batch-size 512" --checkpoint-layers 'blocks\.\d+$' --rounds 5

Each step draws a batch of samples, each with 13 dense features and 8 multi-hot categorical features (1 to 20 ids per
feature and sample, so the number of ids changes from step to step). The dense features go through a bottom MLP; each
categorical feature is summed from its own embedding table (`nn.EmbeddingBag`, 20,000 rows of 64, dense gradients);
every pair of the nine 64-wide vectors is compared by a dot product (a batched multiply, then the lower triangle), and a
top MLP gives one logit, trained with binary cross entropy. Adagrad, the usual optimizer for embedding tables
(`--optim loop`: foreach=False, the default; `foreach`: foreach=True). On the CPU only (--device is taken and ignored).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Mlp(nn.Module):
    def __init__(self, sizes, last_activation=True, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.blocks = nn.ModuleList()
        for i, (inputs, outputs) in enumerate(zip(sizes, sizes[1:])):
            last = i == len(sizes) - 2
            layers = [nn.Linear(inputs, outputs)]
            if last_activation or not last:
                layers.append(nn.ReLU())
            self.blocks.append(nn.Sequential(*layers))

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.use_checkpoint else block(x)
        return x


class Recommender(nn.Module):
    def __init__(self, dense=13, tables=8, rows=20_000, dim=64, use_checkpoint=False):
        super().__init__()
        self.bottom = Mlp([dense, 512, 256, dim], use_checkpoint=use_checkpoint)
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        vectors = tables + 1
        self.register_buffer("pairs", torch.tril_indices(vectors, vectors, offset=-1), persistent=False)
        self.top = Mlp([dim + vectors * (vectors - 1) // 2, 512, 256, 1], last_activation=False,
                       use_checkpoint=use_checkpoint)

    def forward(self, dense, ids, offsets):
        vectors = [self.bottom(dense)]
        vectors += [table(feature_ids, feature_offsets)
                    for table, feature_ids, feature_offsets in zip(self.embeddings, ids, offsets)]
        stacked = torch.stack(vectors, dim=1)
        products = torch.bmm(stacked, stacked.transpose(1, 2))
        interactions = products[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([vectors[0], interactions], dim=1)).squeeze(1)


def batch_of_samples(samples, dense, tables, rows, generator):
    """Dense features, per table the ids of every sample's bag and where each bag starts, and click labels."""
    x = torch.randn(samples, dense, generator=generator)
    ids, offsets = [], []
    for _ in range(tables):
        lengths = torch.randint(1, 21, (samples,), generator=generator)
        offsets.append(torch.cumsum(lengths, 0) - lengths)
        ids.append(torch.randint(0, rows, (int(lengths.sum()),), generator=generator))
    labels = (torch.rand(samples, generator=generator) < 0.25).float()
    return x, ids, offsets, labels


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--rows", type=int, default=20_000)
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
    generator = torch.Generator().manual_seed(1)
    model = Recommender(tables=a.tables, rows=a.rows, use_checkpoint=a.checkpoint)
    opt = torch.optim.Adagrad(model.parameters(), lr=1e-2, foreach=a.optim == "foreach")
    step_model = torch.compile(model) if a.compile else model
    model.train()
    for _ in range(a.steps):
        dense, ids, offsets, labels = batch_of_samples(a.batch_size, 13, a.tables, a.rows, generator)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
            logits = step_model(dense, ids, offsets)
            loss = F.binary_cross_entropy_with_logits(logits.float(), labels)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
