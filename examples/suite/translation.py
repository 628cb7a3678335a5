"""Machine translation: an encoder-decoder transformer trained with teacher forcing on synthetic sentence pairs.

    python examples/suite/translation.py --steps 20
    daydream trace examples/suite/translation.py -- --steps 20

The layout of "Attention Is All You Need" (post-norm encoder and decoder layers, masked
self-attention and cross-attention in the decoder, shared source/target vocabulary), small:
--layers 6 --model 512 --heads 8 is the base model. Flags of the shared loop: examples/training.py.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # examples/training.py
import training  # noqa: E402

PAD, BOS = 0, 1


class Heads(nn.Module):
    """softmax(q k^T / sqrt(d)) v over heads, from projected q, k and v (causal for the decoder's self-attention)."""

    def __init__(self, heads: int, causal: bool) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        split = lambda t: t.view(t.shape[0], t.shape[1], self.heads, -1).transpose(1, 2)  # noqa: E731
        y = nn.functional.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=self.causal)
        return y.transpose(1, 2).flatten(2)


class Attention(nn.Module):
    def __init__(self, model: int, heads: int, causal: bool = False) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(model, model), nn.Linear(model, model), nn.Linear(model, model)
        self.heads = Heads(heads, causal)
        self.out = nn.Linear(model, model)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        return self.out(self.heads(self.q(x), self.k(memory), self.v(memory)))


class AddNorm(nn.Module):
    """Post-norm residual: LayerNorm(x + sublayer(x))."""

    def __init__(self, model: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(model)

    def forward(self, x: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        return self.norm(x + update)


class EncoderLayer(nn.Module):
    def __init__(self, model: int, heads: int) -> None:
        super().__init__()
        self.attention = Attention(model, heads)
        self.norm1 = AddNorm(model)
        self.feed_forward = nn.Sequential(nn.Linear(model, 4 * model), nn.ReLU(), nn.Linear(4 * model, model))
        self.norm2 = AddNorm(model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x, self.attention(x, x))
        return self.norm2(x, self.feed_forward(x))


class DecoderLayer(nn.Module):
    def __init__(self, model: int, heads: int) -> None:
        super().__init__()
        self.self_attention = Attention(model, heads, causal=True)
        self.norm1 = AddNorm(model)
        self.cross_attention = Attention(model, heads)
        self.norm2 = AddNorm(model)
        self.feed_forward = nn.Sequential(nn.Linear(model, 4 * model), nn.ReLU(), nn.Linear(4 * model, model))
        self.norm3 = AddNorm(model)

    def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        y, memory = pair
        y = self.norm1(y, self.self_attention(y, y))
        y = self.norm2(y, self.cross_attention(y, memory))
        return self.norm3(y, self.feed_forward(y)), memory


class Embedding(nn.Module):
    """Token plus learned position embeddings."""

    def __init__(self, vocabulary: int, model: int, length: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocabulary, model) * 0.02)
        self.position = nn.Parameter(torch.randn(length, model) * 0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.weight[tokens] + self.position[: tokens.shape[1]]


class Translator(nn.Module):
    def __init__(self, vocabulary: int, model: int, heads: int, layers: int, length: int, checkpoint: bool = False) -> None:
        super().__init__()
        self.embed = Embedding(vocabulary, model, length)
        self.encoder = nn.ModuleList(EncoderLayer(model, heads) for _ in range(layers))
        self.decoder = nn.ModuleList(DecoderLayer(model, heads) for _ in range(layers))
        self.generator = nn.Linear(model, vocabulary)
        self.checkpoint = checkpoint

    def forward(self, source: torch.Tensor, target_in: torch.Tensor) -> torch.Tensor:
        memory = training.through(self.encoder, self.embed(source), self.checkpoint)
        y = self.embed(target_in)
        for layer in self.decoder:
            y, _ = torch.utils.checkpoint.checkpoint(layer, (y, memory), use_reentrant=False) if self.checkpoint else layer((y, memory))
        return self.generator(y)


def main() -> None:
    parser = training.options(__doc__.splitlines()[0], batch_size=16)
    parser.add_argument("--length", type=int, default=32, help="tokens per sentence")
    parser.add_argument("--vocabulary", type=int, default=2000)
    parser.add_argument("--model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args()
    device, _ = training.setup(args)
    model = training.wrap(Translator(args.vocabulary, args.model, args.heads, args.layers, args.length + 1,
                                     checkpoint=args.checkpoint).to(device), args)
    optimizer = training.optimizer(torch.optim.Adam, model, args, lr=3e-4, betas=(0.9, 0.98))
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        source = torch.randint(2, args.vocabulary, (args.batch_size, args.length), device=device)
        target = torch.randint(2, args.vocabulary, (args.batch_size, args.length), device=device)
        return source, target

    def loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        source, target = batch
        bos = torch.full((target.shape[0], 1), BOS, dtype=target.dtype, device=target.device)
        logits = model(source, torch.cat([bos, target[:, :-1]], dim=1))  # teacher forcing: the shifted target is the input
        return loss_fn(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))

    training.train(model, batch, loss, optimizer, args, device)


if __name__ == "__main__":
    main()
