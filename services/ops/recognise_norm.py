"""What a norm-shaped module computes, found by running it — never from its class or argument names.

An unseen architecture's norm is still a norm, and a module shaped like one may not be the one we can
write: Cohere's LayerNorm has one weight, an epsilon and `forward(hidden_states)` exactly like an RMSNorm,
but subtracts the mean. So the module's own forward runs on probe rows with a non-zero mean (where the
variants disagree), and its output is compared with each formula computed in fp32 from the module's own
weight, bias and epsilon:

  rmsnorm          weight · x / sqrt(mean(x²) + eps)            Llama, Qwen2/3, Mistral, torch.nn.RMSNorm
                   (the normalised row cast to the dtype, then multiplied by the weight)
  rmsnorm_fp32_weight  the same, the weight applied in fp32 and cast once   OLMo2
  rmsnorm_offset   (1 + weight) · x / sqrt(mean(x²) + eps)      Gemma
  layernorm        weight · (x − mean) / sqrt(var + eps) + bias GPT-2, BERT-style encoders (nn.LayerNorm)
  layernorm_no_bias  the same without a bias                    Cohere
  layernorm_offset (1 + weight) · (x − mean) / sqrt(var + eps) + bias   Nemotron (LayerNorm1P: 1 + weight
                   formed in the weight's dtype)

A module that matches none is not recognised (None): the profiler then says what it found, and nothing
is written for it.

The two RMSNorms differ only in where they round (once or twice), which a formula in fp32 cannot see: in a
half dtype the module's own output is compared bit for bit with both casting orders computed as torch does.
In fp32 they are one computation, named `rmsnorm`.
"""

from __future__ import annotations

import torch

from services.ops.row_reduction import EPS_ATTRS
from services.ops.row_reduction import VARIANTS as VARIANTS  # the family's variants are what is recognised

PROBE_ROWS = 4
# Relative to the output's scale: one rounding of the served dtype, with room for a different summation order.
TOLERANCE = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def epsilon_of(module: torch.nn.Module) -> float | None:
    """A norm module's epsilon, under whichever name its class keeps it."""
    for name in EPS_ATTRS:
        value = getattr(module, name, None)
        if isinstance(value, float):
            return value
    floats = [v for v in vars(module).values() if isinstance(v, float)]
    return floats[0] if len(floats) == 1 else None


def _formulas(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> dict:
    rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    centred = x - x.mean(-1, keepdim=True)
    normed = centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
    out = {"rmsnorm": weight * rms, "rmsnorm_offset": (1.0 + weight) * rms}
    if bias is None:
        out["layernorm_no_bias"] = weight * normed
    else:
        out["layernorm"] = weight * normed + bias
        out["layernorm_offset"] = (1.0 + weight) * normed + bias
    return out


def recognise(module: torch.nn.Module) -> str | None:
    """The variant `module` computes (see VARIANTS), or None. Runs its forward once on probe rows."""
    if any(True for _ in module.children()):
        return None
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or not weight.is_floating_point():
        return None
    bias = getattr(module, "bias", None)
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.shape != weight.shape):
        return None
    others = [n for n, _ in module.named_parameters() if n not in ("weight", "bias")]
    eps = epsilon_of(module)
    if others or eps is None:
        return None
    width = weight.shape[0]
    gen = torch.Generator().manual_seed(width)
    probe = (torch.randn(PROBE_ROWS, width, generator=gen) * 2.0 + 0.75).to(weight.device, weight.dtype)
    with torch.inference_mode():
        try:
            got = module(probe)
        except Exception:  # a forward that wants more than one tensor is not a norm of these shapes
            return None
        if not isinstance(got, torch.Tensor) or got.shape != probe.shape:
            return None
        expected = _formulas(probe.float(), weight.float(), None if bias is None else bias.float(), eps)
        scale = max(1.0, float(got.float().abs().max()))
        tol = TOLERANCE.get(weight.dtype, 1e-3) * scale
        found = next((v for v, value in expected.items() if float((got.float() - value).abs().max()) <= tol), None)
        return _casting(got, probe, weight, eps) if found == "rmsnorm" else found


def _casting(got: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float) -> str:
    """Which RMSNorm `got` (the module's output on `x`, in the weight's dtype) is: `rmsnorm` (Llama, Qwen: the
    normalised row rounded to the dtype, then times the weight) or `rmsnorm_fp32_weight` (OLMo2: the weight
    applied in fp32, one rounding at the end). A tie — fp32, or a weight of ones — is `rmsnorm`."""
    if weight.dtype == torch.float32:
        return "rmsnorm"
    f = x.float()
    normed = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + eps)
    orders = {"rmsnorm": weight * normed.to(x.dtype), "rmsnorm_fp32_weight": (weight * normed).to(x.dtype)}
    errors = {v: float((got.float() - y.float()).abs().max()) for v, y in orders.items()}
    return "rmsnorm_fp32_weight" if errors["rmsnorm_fp32_weight"] < errors["rmsnorm"] else "rmsnorm"
