"""Object detection: an SSD-style single-shot detector (backbone, multi-scale heads, anchors, matching, detection loss).

    python examples/suite/detection.py --steps 20
    daydream trace examples/suite/detection.py -- --steps 20

Synthetic images each hold a few random boxes with classes. A small convolutional backbone
yields feature maps at three scales; at every position of each map, anchors of three aspect
ratios are scored (classes + background) and regressed (box offsets). Each step matches
anchors to boxes by IoU (>= 0.5, and each box's best anchor), then takes SSD's loss:
smooth-L1 on the matched anchors' offsets plus cross-entropy with 3:1 hard-negative mining.
Flags of the shared loop: examples/training.py.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # examples/training.py
import training  # noqa: E402

CLASSES, BOXES_PER_IMAGE, RATIOS = 20, 4, (0.5, 1.0, 2.0)


class PerAnchor(nn.Module):
    """A head's (batch, anchors x values, h, w) map as (batch, h x w x anchors, values)."""

    def __init__(self, values: int) -> None:
        super().__init__()
        self.values = values

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1, self.values)


class Join(nn.Module):
    """The anchors of every scale, in one tensor."""

    def forward(self, parts: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(parts, 1)


def conv(channels_in: int, channels_out: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(channels_in, channels_out, 3, stride=stride, padding=1, bias=False),
                         nn.BatchNorm2d(channels_out), nn.ReLU())


class Detector(nn.Module):
    def __init__(self, width: int = 32, checkpoint: bool = False) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv(3, width, 2), conv(width, width, 2))
        # one block per scale: each halves the map; the heads read all three
        self.blocks = nn.ModuleList([conv(width, 2 * width, 2), conv(2 * width, 4 * width, 2), conv(4 * width, 4 * width, 2)])
        anchors = len(RATIOS)
        self.classify = nn.ModuleList(nn.Conv2d(c, anchors * (CLASSES + 1), 3, padding=1) for c in (2 * width, 4 * width, 4 * width))
        self.regress = nn.ModuleList(nn.Conv2d(c, anchors * 4, 3, padding=1) for c in (2 * width, 4 * width, 4 * width))
        self.scores, self.offsets, self.join = PerAnchor(CLASSES + 1), PerAnchor(4), Join()
        self.checkpoint = checkpoint

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, scores, offsets = self.stem(images), [], []
        for block, classify, regress in zip(self.blocks, self.classify, self.regress):
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if self.checkpoint else block(x)
            scores.append(self.scores(classify(x)))
            offsets.append(self.offsets(regress(x)))
        return self.join(scores), self.join(offsets)


def anchors_for(image_size: int, width: int, device: str) -> torch.Tensor:
    """(anchors, 4) boxes (cx, cy, w, h) in [0, 1], in the order the heads emit them."""
    boxes = []
    for level, cells in enumerate((image_size // 8, image_size // 16, image_size // 32)):
        scale = 0.2 + 0.3 * level
        centres = (torch.arange(cells, device=device, dtype=torch.float32) + 0.5) / cells
        cy, cx = torch.meshgrid(centres, centres, indexing="ij")
        for_cell = [torch.tensor([scale * math.sqrt(r), scale / math.sqrt(r)], device=device) for r in RATIOS]
        sizes = torch.stack(for_cell).expand(cells * cells, -1, -1)
        centre = torch.stack([cx, cy], -1).reshape(-1, 1, 2).expand(-1, len(RATIOS), -1)
        boxes.append(torch.cat([centre, sizes], -1).reshape(-1, 4))
    return torch.cat(boxes)


def corners(boxes: torch.Tensor) -> torch.Tensor:
    return torch.cat([boxes[..., :2] - boxes[..., 2:] / 2, boxes[..., :2] + boxes[..., 2:] / 2], -1)


def iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU of (n, 4) and (m, 4) corner boxes."""
    top_left = torch.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    overlap = (bottom_right - top_left).clamp(min=0).prod(-1)
    area = lambda boxes: (boxes[:, 2:] - boxes[:, :2]).prod(-1)  # noqa: E731
    return overlap / (area(a)[:, None] + area(b)[None, :] - overlap)


def detection_loss(scores: torch.Tensor, offsets: torch.Tensor, anchors: torch.Tensor, boxes: torch.Tensor,
                   labels: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        overlaps = torch.stack([iou(corners(anchors), corners(b)) for b in boxes])  # (batch, anchors, boxes)
        best, which = overlaps.max(-1)
        best[torch.arange(boxes.shape[0])[:, None], overlaps.argmax(1)] = 1.0  # every box keeps its best anchor
        positive = best >= 0.5
        matched = torch.gather(boxes, 1, which[..., None].expand(-1, -1, 4))
        target_class = torch.where(positive, torch.gather(labels, 1, which) + 1, torch.zeros_like(which))
        target_offsets = torch.cat([(matched[..., :2] - anchors[:, :2]) / anchors[:, 2:] / 0.1,
                                    torch.log(matched[..., 2:] / anchors[:, 2:]) / 0.2], -1)
    positives = positive.sum().clamp(min=1)
    location = nn.functional.smooth_l1_loss(offsets[positive].float(), target_offsets[positive], reduction="sum")
    confidence = nn.functional.cross_entropy(scores.float().flatten(0, 1), target_class.flatten(), reduction="none").view_as(best)
    with torch.no_grad():  # hard-negative mining: the 3 x positives hardest background anchors per image
        background = confidence.masked_fill(positive, 0.0)
        rank = background.argsort(1, descending=True).argsort(1)
        hard = rank < 3 * positive.sum(1, keepdim=True)
    return (location + confidence[positive | hard].sum()) / positives


def main() -> None:
    parser = training.options(__doc__.splitlines()[0], batch_size=8)
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--width", type=int, default=32)
    args = parser.parse_args()
    device, _ = training.setup(args)
    model = training.wrap(Detector(args.width, checkpoint=args.checkpoint).to(device), args)
    optimizer = training.optimizer(torch.optim.SGD, model, args, lr=1e-3, momentum=0.9, weight_decay=5e-4)
    anchors = anchors_for(args.image_size, args.width, device)

    def batch(step: int) -> tuple[torch.Tensor, ...]:
        images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
        centres = torch.rand(args.batch_size, BOXES_PER_IMAGE, 2, device=device) * 0.6 + 0.2
        sizes = torch.rand(args.batch_size, BOXES_PER_IMAGE, 2, device=device) * 0.3 + 0.1
        labels = torch.randint(0, CLASSES, (args.batch_size, BOXES_PER_IMAGE), device=device)
        return images, torch.cat([centres, sizes], -1), labels

    def loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        images, boxes, labels = batch
        scores, offsets = model(images)
        return detection_loss(scores, offsets, anchors, boxes, labels)

    training.train(model, batch, loss, optimizer, args, device)


if __name__ == "__main__":
    main()
