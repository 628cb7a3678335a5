"""Image classification: a ResNet (basic blocks, BatchNorm, residual connections) on synthetic 64x64 images.

    python examples/suite/resnet.py --steps 20
    daydream trace examples/suite/resnet.py -- --steps 20

A faithful small ResNet-18 layout (stem, four stages of two basic blocks, global pooling),
narrower and on smaller images so that it trains on a CPU in seconds; --width 64
--image-size 224 is the real ResNet-18, and with --layers 50 the real ResNet-50 (stages of
3, 4, 6 and 3 bottleneck blocks, four times as wide at their output, after ImageNet's 7x7
stem and max pool). Flags of the shared
loop: examples/training.py.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # examples/training.py
import training  # noqa: E402


class BasicBlock(nn.Module):
    def __init__(self, channels_in: int, channels_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels_out)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels_out)
        self.relu = nn.ReLU()
        self.shortcut = nn.Identity() if stride == 1 and channels_in == channels_out else nn.Sequential(
            nn.Conv2d(channels_in, channels_out, 1, stride=stride, bias=False), nn.BatchNorm2d(channels_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class Bottleneck(nn.Module):
    """ResNet-50's block: 1x1 down to `inner` channels, 3x3 (with the stride), 1x1 up to `channels_out`."""

    def __init__(self, channels_in: int, inner: int, channels_out: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(channels_in, inner, 1, bias=False), nn.BatchNorm2d(inner)
        self.conv2, self.bn2 = nn.Conv2d(inner, inner, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(inner)
        self.conv3, self.bn3 = nn.Conv2d(inner, channels_out, 1, bias=False), nn.BatchNorm2d(channels_out)
        self.relu = nn.ReLU()
        self.shortcut = nn.Identity() if stride == 1 and channels_in == channels_out else nn.Sequential(
            nn.Conv2d(channels_in, channels_out, 1, stride=stride, bias=False), nn.BatchNorm2d(channels_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, width: int = 16, classes: int = 100, checkpoint: bool = False, layers: int = 18) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        if layers == 50:  # ImageNet's stem: a 7x7 convolution of stride 2, then a 3x3 max pool of stride 2
            self.stem = nn.Sequential(nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(width),
                                      nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1))
        widths = [width, 2 * width, 4 * width, 8 * width]
        blocks: list[nn.Module] = []
        if layers == 50:
            before = width
            for stage, (inner, count) in enumerate(zip(widths, (3, 4, 6, 3))):
                for index in range(count):
                    blocks.append(Bottleneck(before, inner, 4 * inner, 2 if index == 0 and stage > 0 else 1))
                    before = 4 * inner
            features = before
        else:
            layout = [(widths[0], widths[0], 1)] * 2
            for before, after in zip(widths, widths[1:]):
                layout += [(before, after, 2), (after, after, 1)]
            blocks = [BasicBlock(i, o, s) for i, o, s in layout]
            features = widths[-1]
        self.blocks = nn.ModuleList(blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(features, classes)
        self.checkpoint = checkpoint

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = training.through(self.blocks, self.stem(x), self.checkpoint)
        return self.head(torch.flatten(self.pool(x), 1))


def main() -> None:
    parser = training.options(__doc__.splitlines()[0], batch_size=16)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--layers", type=int, choices=(18, 50), default=18, help="ResNet-18 (basic blocks) or ResNet-50")
    args = parser.parse_args()
    device, _ = training.setup(args)
    model = ResNet(args.width, checkpoint=args.checkpoint, layers=args.layers)
    model = training.wrap(model.to(device).to(memory_format=torch.channels_last), args)
    optimizer = training.optimizer(torch.optim.SGD, model, args, lr=0.1, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
        return images.contiguous(memory_format=torch.channels_last), torch.randint(0, 100, (args.batch_size,), device=device)

    training.train(model, batch, lambda model, batch: loss_fn(model(batch[0]), batch[1]), optimizer, args, device)


if __name__ == "__main__":
    main()
