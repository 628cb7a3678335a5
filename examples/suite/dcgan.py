"""An adversarial network: DCGAN (transposed-convolution generator, strided-convolution discriminator), two optimizers per step.

    python examples/suite/dcgan.py --steps 20
    daydream trace examples/suite/dcgan.py -- --steps 20

Each step updates the discriminator on real and generated images, then the generator
through the discriminator, with Adam(lr 2e-4, betas 0.5/0.999) as in the DCGAN paper.
"Real" images are synthetic (smooth random patterns). An iteration, for daydream trace,
ends at the discriminator's optimizer.step() (the first optimizer to step). Flags of the
shared loop (examples/training.py) apply, except --cuda-graphs and --amp fp16.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # examples/training.py
import training  # noqa: E402

LATENT = 100


def up(channels_in: int, channels_out: int) -> nn.Sequential:
    return nn.Sequential(nn.ConvTranspose2d(channels_in, channels_out, 4, 2, 1, bias=False), nn.BatchNorm2d(channels_out), nn.ReLU())


def down(channels_in: int, channels_out: int, norm: bool = True) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(channels_in, channels_out, 4, 2, 1, bias=False),
                         nn.BatchNorm2d(channels_out) if norm else nn.Identity(), nn.LeakyReLU(0.2))


class Generator(nn.Module):
    def __init__(self, width: int, checkpoint: bool = False) -> None:
        super().__init__()
        self.project = nn.Sequential(nn.ConvTranspose2d(LATENT, 8 * width, 4, 1, 0, bias=False), nn.BatchNorm2d(8 * width), nn.ReLU())
        self.blocks = nn.ModuleList([up(8 * width, 4 * width), up(4 * width, 2 * width), up(2 * width, width)])
        self.to_image = nn.Sequential(nn.ConvTranspose2d(width, 3, 4, 2, 1, bias=False), nn.Tanh())
        self.checkpoint = checkpoint

    def forward(self, z: torch.Tensor) -> torch.Tensor:  # (batch, LATENT) -> (batch, 3, 64, 64)
        return self.to_image(training.through(self.blocks, self.project(z[:, :, None, None]), self.checkpoint))


class Discriminator(nn.Module):
    def __init__(self, width: int, checkpoint: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([down(3, width, norm=False), down(width, 2 * width), down(2 * width, 4 * width),
                                     down(4 * width, 8 * width)])
        self.score = nn.Conv2d(8 * width, 1, 4, 1, 0)
        self.checkpoint = checkpoint

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.score(training.through(self.blocks, images, self.checkpoint)).flatten()


def main() -> None:
    parser = training.options(__doc__.splitlines()[0], batch_size=16)
    parser.add_argument("--width", type=int, default=32)
    args = parser.parse_args()
    if args.cuda_graphs or args.amp == "fp16":
        raise SystemExit("dcgan: --cuda-graphs and --amp fp16 are not supported here (two optimizers per step)")
    device, _ = training.setup(args)
    generator = training.wrap(Generator(args.width, args.checkpoint).to(device), args)
    discriminator = training.wrap(Discriminator(args.width, args.checkpoint).to(device), args)
    d_optimizer = training.optimizer(torch.optim.Adam, discriminator, args, lr=2e-4, betas=(0.5, 0.999))
    g_optimizer = training.optimizer(torch.optim.Adam, generator, args, lr=2e-4, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()
    grid = torch.linspace(-3, 3, 64, device=device)
    autocast = torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=args.amp == "bf16")
    for step in range(args.steps):
        phase = torch.rand(args.batch_size, 3, 1, 1, device=device) * 6
        real = torch.tanh(torch.sin(grid[None, None, :, None] + phase) * torch.cos(grid[None, None, None, :] * phase))
        ones = torch.ones(args.batch_size, device=device)
        zeros = torch.zeros(args.batch_size, device=device)
        # the discriminator: real images are real, generated ones are not
        d_optimizer.zero_grad(set_to_none=True)
        with autocast:
            fake = generator(torch.randn(args.batch_size, LATENT, device=device))
            d_loss = bce(discriminator(real).float(), ones) + bce(discriminator(fake.detach()).float(), zeros)
        d_loss.backward()
        d_optimizer.step()
        # the generator: make the discriminator call its images real
        g_optimizer.zero_grad(set_to_none=True)
        with autocast:
            g_loss = bce(discriminator(fake).float(), ones)
        g_loss.backward()
        g_optimizer.step()
        if step % 10 == 0:
            print(f"step {step} discriminator {d_loss.item():.3f} generator {g_loss.item():.3f}")


if __name__ == "__main__":
    main()
