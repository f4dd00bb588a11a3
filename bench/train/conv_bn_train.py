"""Training step of a convolution block in fp32: Conv2d 3x3, BatchNorm (running statistics: eval semantics), ReLU,
2x2 max pooling, on 32 images of 64 x 56 x 56."""

import torch

TRAINING = True
BATCH, CHANNELS, SIDE = 32, 64, 56


class Model(torch.nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIDE, SIDE)]


def get_init_inputs():
    return [CHANNELS]
