r"""Graph classification with message passing on random graphs of varying size: a training script written apart from the
examples' shared loop (examples/training.py), as a user's own script is, that takes the flags `scripts/whatif_truth.py
--script` runs its variants with (--device, --steps, --batch-size, --optim loop|foreach, --amp, --checkpoint,
--compile).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/gnn.py \
        --script-args "--batch-size 32" --checkpoint-layers 'layers\.\d+$' --rounds 5

Each step draws a batch of graphs (8 to 40 nodes each, about three edges per node, random node features), packs them
into one disjoint graph (node and edge counts change from step to step), and runs four residual message-passing layers:
each node's neighbours' features gathered along the edges (`index_select`), transformed, summed into the node
(`index_add`) and normalised by its degree, then an MLP update with LayerNorm; the nodes of each graph mean-pooled
(`index_add` by graph), a linear classifier, cross entropy. Adam (`--optim loop`: foreach=False, the default; `foreach`:
foreach=True). On the CPU only (--device is taken and ignored).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class MessagePassing(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.message = nn.Linear(dim, dim)
        self.update = nn.Sequential(nn.Linear(2 * dim, 2 * dim), nn.SiLU(), nn.Linear(2 * dim, dim))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, source, target, degree):
        messages = self.message(x).index_select(0, source)
        gathered = torch.zeros_like(x).index_add(0, target, messages) / degree
        return x + self.update(torch.cat([self.norm(x), gathered], dim=-1))


class Classifier(nn.Module):
    def __init__(self, features=32, dim=128, depth=4, classes=10, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.embed = nn.Linear(features, dim)
        self.layers = nn.ModuleList(MessagePassing(dim) for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, x, source, target, graph, graphs):
        degree = torch.zeros(x.shape[0]).index_add(0, target, torch.ones_like(target, dtype=x.dtype))
        degree = degree.clamp(min=1).unsqueeze(-1)
        x = self.embed(x)
        for layer in self.layers:
            x = (checkpoint(layer, x, source, target, degree, use_reentrant=False) if self.use_checkpoint
                 else layer(x, source, target, degree))
        counts = torch.zeros(graphs).index_add(0, graph, torch.ones_like(graph, dtype=torch.float)).unsqueeze(-1)
        pooled = torch.zeros(graphs, x.shape[1], dtype=x.dtype).index_add(0, graph, x) / counts
        return self.head(pooled)


def batch_of_graphs(graphs, features, generator):
    """One disjoint graph of `graphs` random graphs: node features, edges (source, target), each node's graph, labels."""
    sizes = torch.randint(8, 41, (graphs,), generator=generator)
    offsets = torch.cumsum(sizes, 0) - sizes
    nodes = int(sizes.sum())
    graph = torch.repeat_interleave(torch.arange(graphs), sizes)
    edges = 3 * nodes
    owner = torch.randint(0, nodes, (edges,), generator=generator)
    source = owner
    # each edge's other end lies in the same graph
    target = offsets[graph[owner]] + (torch.rand(edges, generator=generator) * sizes[graph[owner]]).long()
    x = torch.randn(nodes, features, generator=generator)
    labels = torch.randint(0, 10, (graphs,), generator=generator)
    return x, torch.cat([source, target]), torch.cat([target, source]), graph, labels


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--features", type=int, default=32)
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
    model = Classifier(features=a.features, use_checkpoint=a.checkpoint)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=a.optim == "foreach")
    step_model = torch.compile(model, dynamic=True) if a.compile else model
    model.train()
    for _ in range(a.steps):
        x, source, target, graph, labels = batch_of_graphs(a.batch_size, a.features, generator)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
            logits = step_model(x, source, target, graph, a.batch_size)
            loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
