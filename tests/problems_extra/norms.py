"""LayerNorm, GroupNorm, eval-mode BatchNorm and InstanceNorm on one small activation."""
import torch


class Model(torch.nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.ln = torch.nn.LayerNorm([channels, 4, 4])
        self.gn = torch.nn.GroupNorm(2, channels)
        self.bn = torch.nn.BatchNorm2d(channels)
        self.inorm = torch.nn.InstanceNorm2d(channels, affine=True)
        self.bn.running_mean.uniform_(-0.5, 0.5)
        self.bn.running_var.uniform_(0.5, 1.5)
        self.eval()

    def forward(self, x):
        return self.ln(x), self.gn(x), self.bn(x), self.inorm(x)


def get_inputs():
    return [torch.randn(2, 4, 4, 4)]


def get_init_inputs():
    return [4]
