r"""A small U-Net trained on random segmentation masks: a training script written apart from the examples' shared loop
(examples/training.py), as a user's own script is, that takes the flags `scripts/whatif_truth.py --script` runs its
variants with (--device, --steps, --batch-size, --optim loop|foreach, --amp, --checkpoint, --compile).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/unet.py \
        --script-args "--batch-size 8 --size 32" --checkpoint-layers '(down|up)\.\d+$' --rounds 3

GroupNorm, SiLU, max pooling, ConvTranspose2d upsampling and skip concatenations; AdamW with gradient clipping; on the
CPU only (--device is taken and ignored).
"""
import argparse
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Stage(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm1 = nn.GroupNorm(8, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.norm2 = nn.GroupNorm(8, cout)

    def forward(self, x):
        x = F.silu(self.norm1(self.conv1(x)))
        return F.silu(self.norm2(self.conv2(x)))


class UNet(nn.Module):
    def __init__(self, width=32, classes=5, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        chans = [width, width * 2, width * 4]
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.down = nn.ModuleList([Stage(chans[0], chans[0]), Stage(chans[0], chans[1]), Stage(chans[1], chans[2])])
        self.upsample = nn.ModuleList([nn.ConvTranspose2d(chans[2], chans[1], 2, stride=2),
                                       nn.ConvTranspose2d(chans[1], chans[0], 2, stride=2)])
        self.up = nn.ModuleList([Stage(chans[1] * 2, chans[1]), Stage(chans[0] * 2, chans[0])])
        self.head = nn.Conv2d(chans[0], classes, 1)

    def _run(self, stage, x):
        return checkpoint(stage, x, use_reentrant=False) if self.use_checkpoint else stage(x)

    def forward(self, x):
        x = self.stem(x)
        skips = []
        for i, stage in enumerate(self.down):
            x = self._run(stage, x)
            if i < len(self.down) - 1:
                skips.append(x)
                x = F.max_pool2d(x, 2)
        for upsample, stage in zip(self.upsample, self.up):
            x = upsample(x)
            x = self._run(stage, torch.cat([x, skips.pop()], dim=1))
        return self.head(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--optim", default="default")
    p.add_argument("--amp", nargs="?", const="bf16", default=None)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = UNet(use_checkpoint=a.checkpoint)
    kw = {"loop": {"foreach": False}, "foreach": {"foreach": True}}.get(a.optim, {})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, **kw)
    step_model = torch.compile(model) if a.compile else model
    images = torch.randn(a.batch_size, 3, a.size, a.size)
    masks = torch.randint(0, 5, (a.batch_size, a.size, a.size))
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
            loss = F.cross_entropy(step_model(images), masks)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


if __name__ == "__main__":
    main()
