r"""A word-level LSTM language model trained by truncated backpropagation through time: a training script written
apart from the examples' shared loop (examples/training.py), as a user's own script is, that takes the flags
`scripts/whatif_truth.py --script` runs its variants with (--device, --steps, --batch-size, --optim loop|foreach,
--amp, --checkpoint, --compile).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/lstm_lm.py \
        --script-args "--batch-size 20" --checkpoint-layers 'rnns\.\d+$' --rounds 3

An embedding, stacked one-layer LSTMs with dropout between them and a linear decoder over the vocabulary, as the
classic word-language-model recipe has it: the hidden state carried from one window of 35 tokens to the next and
detached there, gradients clipped by their global norm, and plain SGD written by hand (`p.data.add_(p.grad,
alpha=-lr)` over the parameters, `--optim loop`, the default) or torch.optim.SGD (`--optim foreach`). On the CPU only
(--device is taken and ignored).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class LanguageModel(nn.Module):
    def __init__(self, vocab=10000, width=200, layers=2, dropout=0.2, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.embed = nn.Embedding(vocab, width)
        self.rnns = nn.ModuleList(nn.LSTM(width, width) for _ in range(layers))
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(width, vocab)

    def forward(self, tokens, state):
        x = self.drop(self.embed(tokens))
        carried = []
        for rnn, (h, c) in zip(self.rnns, state):
            if self.use_checkpoint:
                x, (h, c) = checkpoint(rnn, x, (h, c), use_reentrant=False)
            else:
                x, (h, c) = rnn(x, (h, c))
            x = self.drop(x)
            carried.append((h, c))
        return self.decoder(x), carried


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--bptt", type=int, default=35)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=20.0)
    p.add_argument("--optim", default="loop")
    p.add_argument("--amp", nargs="?", const="bf16", default=None)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = LanguageModel(use_checkpoint=a.checkpoint)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, foreach=True) if a.optim == "foreach" else None
    step_model = torch.compile(model) if a.compile else model
    vocab = model.decoder.out_features
    corpus = torch.randint(0, vocab, (a.bptt * (a.steps + 1) + 1, a.batch_size))
    state = [(torch.zeros(1, a.batch_size, rnn.hidden_size), torch.zeros(1, a.batch_size, rnn.hidden_size))
             for rnn in model.rnns]
    model.train()
    for step in range(a.steps):
        start = step * a.bptt
        tokens, targets = corpus[start:start + a.bptt], corpus[start + 1:start + 1 + a.bptt]
        state = [(h.detach(), c.detach()) for h, c in state]
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
            logits, state = step_model(tokens, state)
            loss = F.cross_entropy(logits.view(-1, vocab), targets.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        if opt is not None:
            opt.step()
        else:
            with torch.no_grad():
                for param in model.parameters():
                    param.data.add_(param.grad, alpha=-a.lr)


if __name__ == "__main__":
    main()
