r"""A tagger over packed variable-length sentences: a training script written apart from the examples' shared loop
(examples/training.py), as a user's own script is, that takes the flags `scripts/whatif_truth.py --script` runs its
variants with (--device, --steps, --batch-size, --optim loop|foreach, --amp, --checkpoint, --compile).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/packed_tagger.py \
        --script-args "--batch-size 16" --checkpoint-layers 'encoder$' --rounds 3

Word embeddings packed by each sentence's length (`pack_padded_sequence`, unsorted), a two-layer bidirectional `nn.GRU`
over the packed batch, padded back and tagged by a linear layer; cross-entropy that ignores the padding; two
micro-batches per step (gradient accumulation), gradients clipped by their global norm, AdamW under a one-cycle
schedule. On the CPU only (--device is taken and ignored).
"""
import argparse

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.utils.checkpoint import checkpoint

VOCAB, TAGS = 4000, 12


class Encoder(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.rnn = nn.GRU(width, width, num_layers=2, batch_first=True, bidirectional=True)

    def forward(self, embedded, lengths):
        packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        hidden, _ = self.rnn(packed)
        return pad_packed_sequence(hidden, batch_first=True, total_length=embedded.shape[1])[0]


class Tagger(nn.Module):
    def __init__(self, width=96, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.embed = nn.Embedding(VOCAB, width, padding_idx=0)
        self.encoder = Encoder(width)
        self.out = nn.Linear(2 * width, TAGS)

    def forward(self, tokens, lengths):
        embedded = self.embed(tokens)
        if self.use_checkpoint:
            hidden = checkpoint(self.encoder, embedded, lengths, use_reentrant=False)
        else:
            hidden = self.encoder(embedded, lengths)
        return self.out(hidden)


def batches(count, batch, length):
    """Random sentences of 5 to `length` words, padded to `length`, with their tags (-100 on the padding)."""
    generator = torch.Generator().manual_seed(0)
    found = []
    for _ in range(count):
        lengths = torch.randint(5, length + 1, (batch,), generator=generator)
        tokens = torch.randint(1, VOCAB, (batch, length), generator=generator)
        padding = torch.arange(length).unsqueeze(0) >= lengths.unsqueeze(1)
        tokens[padding] = 0
        tags = torch.randint(0, TAGS, (batch, length), generator=generator)
        tags[padding] = -100
        found.append((tokens, lengths, tags))
    return found


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--length", type=int, default=40)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--accumulate", type=int, default=2)
    p.add_argument("--optim", default="default")
    p.add_argument("--amp", nargs="?", const="bf16", default=None)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Tagger(use_checkpoint=a.checkpoint)
    kw = {"loop": {"foreach": False}, "foreach": {"foreach": True}}.get(a.optim, {})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **kw)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=a.steps + 1)
    loss_of = nn.CrossEntropyLoss(ignore_index=-100)
    step_model = torch.compile(model) if a.compile else model
    data = batches(4, a.batch_size, a.length)
    for step in range(a.steps):
        for micro in range(a.accumulate):
            tokens, lengths, tags = data[(step * a.accumulate + micro) % len(data)]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
                scores = step_model(tokens, lengths)
            loss = loss_of(scores.float().reshape(-1, TAGS), tags.reshape(-1)) / a.accumulate
            loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
