r"""A bidirectional GRU sequence tagger trained with Adam: a training script written apart from the examples' shared loop
(examples/training.py), as a user's own script is, that takes the flags `scripts/whatif_truth.py --script` runs its
variants with (--device, --steps, --batch-size, --optim loop|foreach, --amp, --checkpoint, --compile).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/gru_tagger.py \
        --script-args "--batch-size 32" --checkpoint-layers '^Tagger\.(encoder|decoder)$' --rounds 3

Word embeddings and a character-level convolution per word (embedded characters, a 1-d convolution, max over the
characters) concatenated, a two-layer bidirectional `nn.GRU` with dropout between its layers, then a per-token MLP
(linear, SiLU, layer norm, linear) over 24 tags; cross entropy over the tokens that are not padding, Adam
(`--optim loop`: foreach=False, the default; `foreach`: foreach=True) with a step schedule, gradients clipped by their
value. Batches of random sentences made in the loop. On the CPU only (--device is taken and ignored).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Characters(nn.Module):
    """A word's characters embedded, convolved and max-pooled into one vector."""

    def __init__(self, alphabet=96, dim=32, filters=64):
        super().__init__()
        self.embed = nn.Embedding(alphabet, dim, padding_idx=0)
        self.conv = nn.Conv1d(dim, filters, 3, padding=1)

    def forward(self, chars):  # [batch, length, letters]
        b, n, k = chars.shape
        x = self.embed(chars.view(b * n, k)).transpose(1, 2)
        return F.relu(self.conv(x)).amax(-1).view(b, n, -1)


class Encoder(nn.Module):
    def __init__(self, vocab, dim, hidden):
        super().__init__()
        self.words = nn.Embedding(vocab, dim, padding_idx=0)
        self.chars = Characters()
        self.rnn = nn.GRU(dim + 64, hidden, num_layers=2, bidirectional=True, batch_first=True, dropout=0.2)

    def forward(self, words, chars):
        x = torch.cat([self.words(words), self.chars(chars)], -1)
        return self.rnn(x)[0]


class Decoder(nn.Module):
    def __init__(self, hidden, tags):
        super().__init__()
        self.hidden = nn.Linear(2 * hidden, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.out = nn.Linear(hidden, tags)

    def forward(self, x):
        return self.out(self.norm(F.silu(self.hidden(x))))


class Tagger(nn.Module):
    def __init__(self, vocab=20000, dim=128, hidden=192, tags=24, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.encoder = Encoder(vocab, dim, hidden)
        self.decoder = Decoder(hidden, tags)

    def forward(self, words, chars):
        if self.use_checkpoint:
            x = checkpoint(self.encoder, words, chars, use_reentrant=False)
            return checkpoint(self.decoder, x, use_reentrant=False)
        return self.decoder(self.encoder(words, chars))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--length", type=int, default=48)
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
    model = Tagger(use_checkpoint=a.checkpoint)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=a.optim == "foreach")
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    step_model = torch.compile(model) if a.compile else model
    model.train()
    for _ in range(a.steps):
        lengths = torch.randint(a.length // 2, a.length + 1, (a.batch_size,))
        pad = torch.arange(a.length) >= lengths.unsqueeze(1)
        words = torch.randint(1, 20000, (a.batch_size, a.length)).masked_fill(pad, 0)
        chars = torch.randint(1, 96, (a.batch_size, a.length, 12)).masked_fill(pad.unsqueeze(-1), 0)
        tags = torch.randint(0, 24, (a.batch_size, a.length)).masked_fill(pad, -100)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
            logits = step_model(words, chars)
            loss = F.cross_entropy(logits.flatten(0, 1), tags.flatten(), ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
        opt.step()
        schedule.step()


if __name__ == "__main__":
    main()
