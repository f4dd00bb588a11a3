"""An fp32 MLP whose hidden layer runs under ``torch.autocast`` in bf16; the output is fp32."""
import torch

ROWS, WIDTH, HIDDEN = 8, 32, 64


class Model(torch.nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.up = torch.nn.Linear(width, hidden)
        self.down = torch.nn.Linear(hidden, width)

    def forward(self, x):
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            h = torch.nn.functional.gelu(self.up(x))
            y = self.down(h)
        return torch.layer_norm(y.float() + x, (x.shape[-1],))


def get_inputs():
    return [torch.randn(ROWS, WIDTH)]


def get_init_inputs():
    return [WIDTH, HIDDEN]
