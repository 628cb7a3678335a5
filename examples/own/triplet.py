r"""A metric-learning network trained with a triplet loss on random images: a training script written apart from the
examples' shared loop (examples/training.py), as a user's own script is, that takes the flags
`scripts/whatif_truth.py --script` runs its variants with (--device, --steps, --batch-size, --optim loop|foreach,
--amp, --checkpoint, --compile, --width).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/triplet.py \
        --script-args "--batch-size 16 --width 32" --checkpoint-layers 'blocks\.\d+$' --rounds 3

One encoder called three times a step, on the anchors, the positives and the negatives, before one backward: blocks
of two 3x3 convolutions with BatchNorm and ReLU and a 2x2 max pool, then a linear projection to unit-length
embeddings; `nn.TripletMarginLoss`; Adadelta (the optimizer of PyTorch's own MNIST example) with a learning rate
decayed each step; on the CPU only (--device is taken and ignored).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return F.max_pool2d(x, 2)


class Encoder(nn.Module):
    def __init__(self, width=32, size=48, embedding=128, use_checkpoint=False):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        channels = (1, width, 2 * width, 4 * width)
        self.blocks = nn.ModuleList(Block(cin, cout) for cin, cout in zip(channels, channels[1:]))
        side = size // 2 ** (len(channels) - 1)
        self.project = nn.Linear(channels[-1] * side * side, embedding)

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.use_checkpoint else block(x)
        return F.normalize(self.project(torch.flatten(x, 1)), dim=1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--size", type=int, default=48)
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
    model = Encoder(a.width, a.size, use_checkpoint=a.checkpoint)
    kw = {"loop": {"foreach": False}, "foreach": {"foreach": True}}.get(a.optim, {})
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0, **kw)
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.99)
    criterion = nn.TripletMarginLoss(margin=0.2)
    step_model = torch.compile(model) if a.compile else model
    anchors, positives, negatives = (torch.randn(a.batch_size, 1, a.size, a.size) for _ in range(3))
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
            loss = criterion(step_model(anchors), step_model(positives), step_model(negatives))
        loss.backward()
        opt.step()
        schedule.step()


if __name__ == "__main__":
    main()
