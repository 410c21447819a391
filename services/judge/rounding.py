"""How close to a higher-precision reference an honest kernel can be, from the dtypes' own rounding.

A fixed tolerance table (bf16 atol=rtol=1.6e-2) lets a kernel with a systematic 1% bias pass. Here
the bound is derived from what an honest kernel in the dtypes involved produces, measured against
`hi`: the module run on fp32 copies of its input and weights.

Derivation. Let u be the largest unit roundoff among the dtypes involved (input, weight, output)
and fp32 (the reference itself is computed in fp32: nothing is held closer than that).

* rel = 2u + u^2 + 2 * reduce_len * 2**-24. An honest kernel may round twice in the coarse dtype:
  HF casts the normalized row to the input dtype, then multiplies by the weight, each rounding to
  nearest within u, and (1 + u)^2 - 1 = 2u + u^2. The row's scale comes from a sum over the reduced
  dimension in fp32, whose worst-case relative error is reduce_len * 2**-24; the candidate and the
  fp32 reference each make one, hence the factor 2.
* abs = 16 smallest subnormals of the coarsest dtype. Below the smallest normal rounding is
  absolute (half a subnormal), not relative; and HF rounds the normalized value to the input dtype
  *before* the weight multiplies it, so a subnormal intermediate times a weight w is off by up to
  |w|/2 subnormals: 16 covers weights up to ~30 (and exact zeros compare as zeros).
* bias = u + 4u / sqrt(numel) + 2 * sqrt(reduce_len) * 2**-24. Round-to-nearest is unbiased: over
  n independent roundings the mean signed relative error is about u/sqrt(n) (per element under
  0.6u for two roundings), so 4u/sqrt(n) is the noise term. But the roundings are not independent
  and the mean does not shrink to zero: HF rounds x * r to the input dtype, x already in that dtype
  (8 significant bits in bf16) and r one scale per row, so when r's mantissa lies near a power of
  two the whole row rounds alike (up to u/2 in every element), and rows whose scale eps sets (tiny
  inputs) share r exactly, so this does not average out over rows either. Measured on Qwen2RMSNorm:
  one row's mean reaches 0.6u, 16 eps-dominated bf16 rows 0.67u (fp16 subnormal inputs, ~5
  significant bits, 1.06u: services.judge.cases keeps fp16's tiny regime out of the subnormals);
  hence the structural term u. The last term is the fp32 reduction's error on a row's scale, shared
  by the whole row: typically (a random walk) sqrt(reduce_len) * 2**-24, allowed twice. So in 16-bit
  dtypes the bias adds little to the elementwise bound; it bites in fp32, where the elementwise
  bound grows with reduce_len and the bias only with its square root. The mean is taken over
  elements with |hi| at least the coarsest dtype's smallest normal (below it one element's relative
  error is large and says nothing about a bias), and judged over 16 elements or more (fewer: it is
  one element's error, which the elementwise bound already holds).

A centred norm (a LayerNorm: services.ops.recognise_norm) adds a term per row, `centred_row_error`:
x - mean is formed in fp32 after a sum whose error is up to reduce_len * 2**-24 * mean(|x|), and that
error is absolute and shared by every centred element of the row, so after scaling by rsqrt(var + eps)
and the weight an element near zero after centring is off by a share of the row's *input* magnitude,
not of its own value — the more so the larger the mean against the spread (inputs around one: the
cancellation is the honest kernel's and the fp32 reference's alike). Measured on CohereLayerNorm, fp32,
width 64: 1.19x the elementwise bound at an element of 2.6e-3 in a row of scale ~3. The candidate and
the reference each make one such sum, hence 2 * reduce_len * 2**-24 * mean|x| * rsqrt(var + eps) *
max|w|. Where that row term exceeds an element's elementwise relative term, the element's relative error
says nothing about a multiplicative bias, so the bias is averaged without it. An RMSNorm never centres.

`compare` applies, in order: where hi is NaN/Inf out must be too ("missing-nonfinite"); where hi
is finite out must be ("nan-output"); |out - hi| <= rel * |hi| + abs elementwise
("outside-tolerance"); |mean signed relative error| <= bias ("biased-output"). All in float64.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch

FP32_U = 2.0**-24  # the reference's own unit roundoff, and the accumulation dtype's
ABS_SUBNORMALS = 16  # a subnormal intermediate times a weight up to ~30 (module docstring)
BIAS_NOISE = 4.0  # the noise term of the bias, in u / sqrt(numel)
BIAS_MIN_COUNT = 16  # the bias is judged over at least this many elements


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the machine epsilon: bf16 2**-8, fp16 2**-11, fp32 2**-24, fp64 2**-53."""
    if not dtype.is_floating_point:
        raise ValueError(f"{dtype} is not a floating-point dtype")
    return torch.finfo(dtype).eps / 2


@dataclass(frozen=True)
class Bound:
    rel: float  # elementwise: |out - hi| <= rel * |hi| + abs
    abs: float
    bias: float  # |mean signed relative error| over the elements of one case must stay under this
    tiny: float = 0.0  # the bias is averaged where |hi| >= tiny (and > 0): below, rounding is absolute

    def text(self) -> str:
        return f"|out - ref| <= {self.rel:.3e} * |ref| + {self.abs:.3e}, |mean rel err| <= {self.bias:.3e}"


def honest_bound(dtypes: Iterable[torch.dtype], reduce_len: int, numel: int) -> Bound:
    """The bound an honest kernel in `dtypes` reaches against the fp32 reference (derivation above)."""
    coarsest = max([*dtypes, torch.float32], key=unit_roundoff)  # the reference is fp32 itself
    u = unit_roundoff(coarsest)
    length = max(int(reduce_len), 1)
    info = torch.finfo(coarsest)
    return Bound(
        rel=2 * u + u * u + 2 * length * FP32_U,
        abs=ABS_SUBNORMALS * info.smallest_normal * info.eps,
        bias=u + BIAS_NOISE * u / math.sqrt(max(int(numel), 1)) + 2 * math.sqrt(length) * FP32_U,
        tiny=info.smallest_normal,
    )


@dataclass(frozen=True)
class Comparison:
    ok: bool
    rule: str  # "" | "nan-output" | "missing-nonfinite" | "outside-tolerance" | "biased-output"
    detail: str  # one line: where (index), candidate vs reference, bound
    max_abs: float
    max_rel: float
    max_ratio: float  # largest |out - hi| / (rel*|hi| + abs): <= 1 passes ("ulp-ish" figure)
    bias: float  # mean signed relative error over finite elements with |hi| >= bound.tiny (and > 0)


def _first(mask: torch.Tensor) -> tuple[int, ...]:
    flat = int(mask.reshape(-1).nonzero()[0])
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), mask.shape))


def centred_row_error(x: torch.Tensor, weight: torch.Tensor, eps: float, reduce_len: int) -> torch.Tensor:
    """The per-row absolute term of a centred norm (docstring above), shaped to broadcast over its rows."""
    xd = x.detach().to("cpu", torch.float64)
    mean = xd.mean(-1, keepdim=True)
    rstd = torch.rsqrt(((xd - mean) ** 2).mean(-1, keepdim=True) + eps)
    scale = float(weight.detach().abs().max()) if weight.numel() else 1.0
    return 2 * max(int(reduce_len), 1) * FP32_U * xd.abs().mean(-1, keepdim=True) * rstd * scale


def compare(out: torch.Tensor, hi: torch.Tensor, bound: Bound, row_error: torch.Tensor | None = None) -> Comparison:
    """`out` against the fp32 reference `hi` under `bound` (plus a centred norm's per-row term): the rules in
    order, the first failure reported."""
    if tuple(out.shape) != tuple(hi.shape):
        raise ValueError(f"shapes differ: {tuple(out.shape)} vs {tuple(hi.shape)}")
    o = out.detach().to("cpu", torch.float64)
    h = hi.detach().to("cpu", torch.float64)
    o_fin, h_fin = torch.isfinite(o), torch.isfinite(h)
    both = o_fin & h_fin
    zero = torch.zeros_like(o)
    err = torch.where(both, o - h, zero)
    mag = torch.where(h_fin, h.abs(), zero)
    allowed = bound.rel * mag + bound.abs
    if row_error is not None:
        allowed = allowed + torch.nan_to_num(row_error.to(allowed.dtype), nan=0.0, posinf=0.0)
    ratio = torch.nan_to_num(err.abs() / allowed, nan=0.0)  # 0/0 (abs = 0, exact zero) is exact
    nonzero = both & (mag > 0)
    max_abs = float(err.abs().max()) if err.numel() else 0.0
    max_rel = float((err.abs()[nonzero] / mag[nonzero]).max()) if bool(nonzero.any()) else 0.0
    max_ratio = float(ratio.max()) if ratio.numel() else 0.0
    counted = nonzero & (mag >= bound.tiny)
    if row_error is not None:  # where the shared row term dominates, relative error is no sign of a bias
        counted = counted & (row_error <= bound.rel * mag)
    signed = err[counted] / h[counted]  # signed: a multiplicative bias reads the same on either sign of hi
    bias = float(signed.mean()) if signed.numel() else 0.0

    def result(rule: str = "", detail: str = "") -> Comparison:
        return Comparison(not rule, rule, detail, max_abs, max_rel, max_ratio, bias)

    missing = ~h_fin & o_fin
    if bool(missing.any()):
        at = _first(missing)
        return result("missing-nonfinite", f"at {at}: candidate {float(o[at]):.6g}, module {float(h[at])}")
    produced = h_fin & ~o_fin
    if bool(produced.any()):
        at = _first(produced)
        return result("nan-output", f"at {at}: candidate {float(o[at])}, reference {float(h[at]):.6g}")
    if max_ratio > 1:
        at = _first(ratio == ratio.max())
        return result(
            "outside-tolerance",
            f"at {at}: candidate {float(o[at]):.6g} vs reference {float(h[at]):.6g}: |diff| {float(err[at].abs()):.3e}"
            f" > {float(allowed[at]):.3e} ({bound.rel:.3e} * |ref| + {bound.abs:.3e}"
            f"{' + the row term' if row_error is not None else ''}; {max_ratio:.3g}x the bound)",
        )
    if signed.numel() >= BIAS_MIN_COUNT and abs(bias) > bound.bias:
        return result(
            "biased-output",
            f"mean signed relative error {bias:+.3e} over {signed.numel()} elements > {bound.bias:.3e} "
            f"(round-to-nearest is unbiased; elementwise within {max_ratio:.3g}x the bound)",
        )
    return result()
