r"""An MLP-Mixer image classifier trained with gradient accumulation: a training script written apart from the examples'
shared loop (examples/training.py), as a user's own script is, that takes the flags `scripts/whatif_truth.py
--script` runs its variants with (--device, --steps, --batch-size, --optim loop|foreach, --amp, --checkpoint,
--compile).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/mixer.py \
        --script-args "--batch-size 64" --checkpoint-layers 'blocks\.\d+$' --rounds 5

Each optimizer step accumulates the gradients of two micro-batches of `--batch-size` random 32 x 32 images (each loss
divided by two), clips the gradients' norm to 1, and steps AdamW (weight decay 0.05) under a cosine learning-rate
schedule. The model cuts each image into 64 patches of 4 x 4, embeds each to 128 features, and runs four Mixer blocks:
a token-mixing MLP across the 64 patches (64 -> 256 -> 64, on the transposed activations) and a channel-mixing MLP
across the features (128 -> 512 -> 128), each after a LayerNorm and with a residual; then a mean over the patches and a
linear classifier (`--optim loop`: foreach=False, the default; `foreach`: foreach=True). At a batch of 64 the batch is
as many as the patches. On the CPU only (--device is taken and ignored).
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class MixerBlock(nn.Module):
    def __init__(self, tokens, dim, token_hidden, channel_hidden):
        super().__init__()
        self.token_norm = nn.LayerNorm(dim)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(), nn.Linear(token_hidden, tokens))
        self.channel_norm = nn.LayerNorm(dim)
        self.channel_mlp = nn.Sequential(nn.Linear(dim, channel_hidden), nn.GELU(), nn.Linear(channel_hidden, dim))

    def forward(self, x):
        x = x + self.token_mlp(self.token_norm(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.channel_norm(x))


class Mixer(nn.Module):
    def __init__(self, size=32, patch=4, dim=128, depth=4, classes=10, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        tokens = (size // patch) ** 2
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.blocks = nn.ModuleList(MixerBlock(tokens, dim, 256, 512) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, images):
        x = self.embed(images).flatten(2).transpose(1, 2)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.use_checkpoint else block(x)
        return self.head(self.norm(x).mean(dim=1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--accumulate", type=int, default=2)
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
    model = Mixer(use_checkpoint=a.checkpoint)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, foreach=a.optim == "foreach")
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5 * (1 + math.cos(math.pi * step / a.steps)))
    step_model = torch.compile(model) if a.compile else model
    model.train()
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        for _ in range(a.accumulate):
            images = torch.randn(a.batch_size, 3, 32, 32)
            labels = torch.randint(0, 10, (a.batch_size,))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
                loss = F.cross_entropy(step_model(images).float(), labels) / a.accumulate
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()


if __name__ == "__main__":
    main()
