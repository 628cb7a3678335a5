"""Speech recognition: a DeepSpeech2-style model (convolutional front-end, bidirectional GRUs) trained with CTC loss.

    python examples/suite/speech.py --steps 20
    daydream trace examples/suite/speech.py -- --steps 20

Synthetic log-mel spectrograms (80 bins) and character transcripts of random lengths;
two 2-D convolutions subsample time and frequency, recurrent layers read the sequence both
ways, a linear layer scores the 29 characters plus the CTC blank. --layers 5 --hidden 800
approaches DeepSpeech2's size. Flags of the shared loop: examples/training.py.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # examples/training.py
import training  # noqa: E402

MELS, CHARACTERS = 80, 29  # CTC's blank is class 0


class FrontEnd(nn.Module):
    """Two strided 2-D convolutions over (time, frequency) with BatchNorm and hard-tanh, as in DeepSpeech2."""

    def __init__(self, channels: int = 32) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, (11, 41), stride=(2, 2), padding=(5, 20), bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, (11, 21), stride=(1, 2), padding=(5, 10), bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.act = nn.Hardtanh(0, 20)
        self.features = channels * (MELS // 4)

    def forward(self, spectrogram: torch.Tensor) -> torch.Tensor:  # (batch, time, mels) -> (batch, time / 2, features)
        x = self.act(self.bn1(self.conv1(spectrogram.unsqueeze(1))))
        x = self.act(self.bn2(self.conv2(x)))
        return x.permute(0, 2, 1, 3).flatten(2)


class Recurrent(nn.Module):
    def __init__(self, features: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(features)
        self.gru = nn.GRU(features, hidden, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gru(self.norm(x))[0]


class SpeechModel(nn.Module):
    def __init__(self, hidden: int, layers: int, checkpoint: bool = False) -> None:
        super().__init__()
        self.front = FrontEnd()
        self.blocks = nn.ModuleList(Recurrent(self.front.features if i == 0 else 2 * hidden, hidden) for i in range(layers))
        self.head = nn.Linear(2 * hidden, CHARACTERS + 1)
        self.checkpoint = checkpoint

    def forward(self, spectrogram: torch.Tensor) -> torch.Tensor:
        x = training.through(self.blocks, self.front(spectrogram), self.checkpoint)
        return self.head(x).log_softmax(-1)


def main() -> None:
    parser = training.options(__doc__.splitlines()[0], batch_size=8)
    parser.add_argument("--frames", type=int, default=64, help="spectrogram frames (10 ms each)")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=3)
    args = parser.parse_args()
    device, _ = training.setup(args)
    model = training.wrap(SpeechModel(args.hidden, args.layers, checkpoint=args.checkpoint).to(device), args)
    optimizer = training.optimizer(torch.optim.AdamW, model, args, lr=5e-4)
    ctc = nn.CTCLoss(blank=0, zero_infinity=True)
    output_frames = (args.frames + 1) // 2

    def batch(step: int) -> tuple[torch.Tensor, ...]:
        spectrogram = torch.randn(args.batch_size, args.frames, MELS, device=device)
        lengths = torch.randint(output_frames // 4, output_frames // 2, (args.batch_size,), device=device)
        transcripts = torch.randint(1, CHARACTERS + 1, (args.batch_size, output_frames // 2), device=device)
        return spectrogram, transcripts, lengths

    def loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        spectrogram, transcripts, lengths = batch
        log_probs = model(spectrogram).float().transpose(0, 1)  # (time, batch, classes), as CTC wants
        frames = torch.full((spectrogram.shape[0],), log_probs.shape[0], dtype=torch.long, device=log_probs.device)
        return ctc(log_probs, transcripts, frames, lengths)

    training.train(model, batch, loss, optimizer, args, device)


if __name__ == "__main__":
    main()
