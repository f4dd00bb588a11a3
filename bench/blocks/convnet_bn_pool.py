"""A small convolutional net in bfloat16: two conv + BatchNorm (running statistics) + ReLU +
max-pool stages, then global average pooling and a classifier.

Convolutions are cuDNN's; Inductor folds or fuses BatchNorm and ReLU and writes the pooling
and the global average in Triton.
"""

import torch
import torch.nn as nn

batch_size = 64
image_size = 224
classes = 1000

SHAPES = {
    "b64_224": {"batch_size": 64, "image_size": 224},
    "b256_112": {"batch_size": 256, "image_size": 112},
}


def stage(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
                         nn.MaxPool2d(2))


class Model(nn.Module):
    def __init__(self, classes: int):
        super().__init__()
        self.features = nn.Sequential(stage(3, 64), stage(64, 128))
        self.head = nn.Linear(128, classes)
        for m in self.modules():  # running statistics that are not the identity
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
        self.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(batch_size, 3, image_size, image_size, dtype=torch.bfloat16)]


def get_init_inputs():
    return [classes]
