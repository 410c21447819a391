# ruff: noqa  (hostile on purpose: this file is judged, not linted)
"""No Triton at all: plain torch in a wrapper.

pattern: not Triton
layer: static
rule: kernel-import
why hostile: the judge exists to judge Triton kernels; this is the reference with a new name
"""

import torch


def rmsnorm_forward(hidden_states, weight, eps):
    x = hidden_states.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(hidden_states.dtype)
