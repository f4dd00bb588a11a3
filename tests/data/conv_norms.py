"""Two convolution blocks: float32 conv 3x3 + batch norm + ReLU, and bfloat16 conv 3x3 + group
norm + SiLU (the two ways Inductor's convolution templates failed to compile in interpreter mode)."""
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv16 = torch.nn.Conv2d(4, 8, 3, padding=1).to(torch.bfloat16)
        self.gn = torch.nn.GroupNorm(4, 8).to(torch.bfloat16)

    def forward(self, x, y):
        return torch.relu(self.bn(self.conv(x))), torch.nn.functional.silu(self.gn(self.conv16(y)))


def get_inputs():
    return [torch.randn(2, 3, 8, 8), torch.randn(2, 4, 8, 8).to(torch.bfloat16)]


def get_init_inputs():
    return []
