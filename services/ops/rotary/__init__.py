"""The rotary-embedding op family: a module-level function applying RoPE to q and k, recognised by what it computes.

HF models apply rotary position embeddings in a module-level function of their modeling file
(`apply_rotary_pos_emb(q, k, cos, sin, ...)`), which the attention's forward looks up by its global name on
every call: swapping that global swaps the op (a `function` target), and putting the original back reverts it.
Which function does it is found by running, not by name: every function defined in a modeling module that
takes four or more parameters is called on probe tensors, and one whose answer is q and k rotated by cos and
sin is this family's, as one of these variants:

- `rope_half` (Llama, Qwen2/3, Mistral, Gemma): x·cos + rotate_half(x)·sin with rotate_half(x) = (-x2, x1)
  over the two halves of the head dimension, each op rounding to the tensors' dtype as torch's do;
- `rope_interleaved` (Cohere): the same over (even, odd) pairs, computed in fp32 and cast once;
- `rope_half_partial` (GPT-NeoX, Phi-3, Qwen3-Next): cos and sin of a rotary width R <= head_dim (their last dim); the
  first R dims rotated as `rope_half` rotates a head, the other head_dim - R dims passed through;
- `rope_pairs_partial` (GLM): the same split, the first R dims rotated over (even, odd) pairs, pair j by the
  half layout's angle j, each op rounding as torch's do (Helium's and Ernie 4.5's pairs over the whole head are
  it at R = head_dim; Ernie's computes in fp32 and casts once, within the judge's rounding bound of it);
- `rope_half_angles` (GPT-OSS): `rope_half` with cos and sin half as wide as the head, one angle a pair
  (x1·c - x2·s, x2·c + x1·s over the two halves), not repeated into both halves;
- `rope_pairs_angles` (GPT-J, CodeGen): the same over (even, odd) pairs, pair j by angle j, each op rounding as
  torch's do.

Gemma 4 and 3n apply it in a function of one tensor, `apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim)`, called
for q, then for k; GPT-J and CodeGen in `apply_rotary_pos_emb(tensor, sin, cos)`, its tensor (batch, seq, heads,
rotary dims): found by calling them so (`recognise_call`), their parameters' roles recorded (x as the wrapper's q,
GPT-J's tensor as its `x_seq_major`), and served by the same wrapper called without k.

The wrapper (`make_op`) takes q and k as attention passes them ((batch, heads, seq, head_dim) views, usually
transposed out of the projections' layout, so any strides) and cos and sin of (batch, seq, head_dim), and runs
one launch over both: one program per (position, q or k), every head of it, the position's cos and sin read
once. Its outputs are new tensors of q's and k's shapes (laid out as the plan's arguments say: `OUT_STRIDES`).

Over 400 lines, one file: the family's op is six RoPE variants recognised by running them, each with its probe, and
the one wrapper that launches any of them; judging, template and physics live beside it in this package.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import NamedTuple

from services.core.pb import events_pb2 as pb
from services.ops.hub_functions import plain_function
from services.ops.launch import Launcher, launch_options, next_pow2
from services.ops.row_reduction import PlanError, check_launch

FAMILY = "rotary"
PARTIAL_VARIANTS = ("rope_half_partial", "rope_pairs_partial")  # cos's width may be narrower than the head
# cos and sin hold one angle a rotated pair: half the head wide (GPT-OSS's halves, GPT-J's pairs)
ANGLE_VARIANTS = ("rope_half_angles", "rope_pairs_angles")
VARIANTS = ("rope_half", "rope_interleaved", *PARTIAL_VARIANTS, *ANGLE_VARIANTS)
WRITABLE = VARIANTS
KIND = "function"
ENTRYPOINT = "rope"
# Runtime arguments a kernel may take: the operands and outputs, the positions (batch · seq) and seq, the
# head counts, and the strides of q, k (batch, head, seq) and cos/sin (batch, seq) in elements; and the outputs'
# strides. A plan that takes the outputs' strides gets outputs laid out as q and k are when those are the
# projections' transposed views ((batch, seq, heads, head_dim) memory, as HF's own elementwise ops return them:
# each position's heads one contiguous run); a plan without them gets contiguous (batch, heads, seq, head_dim).
OUT_STRIDES = ("qo_sb", "qo_sh", "qo_ss", "ko_sb", "ko_sh", "ko_ss")
ARGS = (
    "q", "k", "cos", "sin", "q_out", "k_out", "positions", "seq", "heads_q", "heads_k",
    "q_sb", "q_sh", "q_ss", "k_sb", "k_sh", "k_ss", "c_sb", "c_ss", *OUT_STRIDES,
)  # fmt: skip
# What each argument is, for the dataflow check (services.core.kernel_dataflow): q, k, cos and sin are read, the
# outputs written; the rest are counts and strides.
ARG_ROLES = {"q": "input", "k": "input", "cos": "input", "sin": "input", "q_out": "output", "k_out": "output"}
ARG_ROLES |= {a: "count" for a in ("positions", "seq", "heads_q", "heads_k")}
ARG_ROLES |= {a: "stride" for a in ARGS if a not in ARG_ROLES}
# q's rows (a head at a position) are q_out's, k's k_out's; cos and sin hold a position's angles, a part of both
# (services.core.row_locality: a program reads only rows it writes)
ROW_SPACES = {"q": "q", "q_out": "q", "k": "k", "k_out": "k", "cos": "table without:sh", "sin": "table without:sh"}
# which tensor each stride strides: q read by k's batch stride reads another batch's q under grouped heads
STRIDE_OWNERS = {
    **{f"q_{d}": ("q",) for d in ("sb", "sh", "ss")}, **{f"k_{d}": ("k",) for d in ("sb", "sh", "ss")},
    **{f"qo_{d}": ("q_out",) for d in ("sb", "sh", "ss")}, **{f"ko_{d}": ("k_out",) for d in ("sb", "sh", "ss")},
    "c_sb": ("cos", "sin"), "c_ss": ("cos", "sin"),
}  # fmt: skip
# half the head dim and the next power of two >= it; the next powers of two >= q's and k's head counts; half
# the rotary width (cos's last dim) and its power of two, the dims passed through (head_dim - rotary width) and
# theirs (at least 1). A plan naming a rotary width takes cos narrower than the head; one without, cos as wide.
CONSTEXPR_EXPRS = (
    "half", "block_half", "block_heads_q", "block_heads_k", "rot_half", "block_rot_half", "pass", "block_pass",
)  # fmt: skip
# A kernel told ANGLES = 1 reads cos and sin of one angle a rotated pair (half the head wide, GPT-OSS's): the wrapper
# takes cos of that width for it, and only for it (a kernel reading both halves of cos would read past each row).
ANGLES = "ANGLES"
PARTIAL_EXPRS = ("rot_half", "block_rot_half", "pass", "block_pass")
# a program per (position, q or k), or a program per position rotating both (cos and sin loaded once for both);
# or a program per (head of q or k, block of N consecutive positions): the kernel told POSITIONS = N by the plan
GRIDS = ("2 * positions", "positions", "cdiv(positions, N) * heads")
MAX_POSITIONS = 256
MAX_HEAD_DIM = 1024
PROBE = (2, 3, 2, 5, 8)  # batch, q heads, k heads, seq, head dim of the recognition probe


# ---------------------------------------------------------------- what it computes


def _reference(variant: str) -> Callable:
    import torch

    def rotate(x):
        if variant in ("rope_half", "rope_half_partial", "rope_half_angles"):
            half = x.shape[-1] // 2
            return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)

    def rope(q, k, cos, sin, unsqueeze_dim: int = 1):
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        if variant == "rope_half_angles":  # one angle a pair: both halves of the head turn by it
            cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
        if variant == "rope_pairs_angles":  # one angle a pair: both elements of each pair turn by it
            cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
        if variant == "rope_pairs_partial":  # the half layout's angles, each for one (even, odd) pair
            cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
            sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
        if variant in PARTIAL_VARIANTS:  # the first cos-width dims rotated, the rest passed through
            r = cos.shape[-1]
            return tuple(torch.cat(((x[..., :r] * cos) + (rotate(x[..., :r]) * sin), x[..., r:]), -1) for x in (q, k))
        if variant == "rope_interleaved":  # computed in fp32 and cast once
            dtype = q.dtype
            q, k = q.float(), k.float()
            return ((q * cos) + (rotate(q) * sin)).to(dtype), ((k * cos) + (rotate(k) * sin)).to(dtype)
        return (q * cos) + (rotate(q) * sin), (k * cos) + (rotate(k) * sin)

    return rope


def reference(variant: str) -> Callable:
    """rope(q, k, cos, sin, unsqueeze_dim=1) -> (q_embed, k_embed) as the HF functions compute it."""
    if variant not in VARIANTS:
        raise ValueError(f"no rotary variant {variant!r} (known: {', '.join(VARIANTS)})")
    return _reference(variant)


def _probe():
    import torch

    b, hq, hk, s, d = PROBE
    gen = torch.Generator().manual_seed(d)
    q, k = torch.randn(b, hq, s, d, generator=gen), torch.randn(b, hk, s, d, generator=gen)
    angles = torch.rand(b, s, d // 2, generator=gen) * 6.0
    return q, k, angles


# How a RoPE function is called: (q, k, cos, sin); one tensor (x, cos, sin), heads-major, for q then k (Gemma 4's),
# its layout told by an unsqueeze_dim where it takes one; one tensor (x, sin, cos), seq-major, for q then k (GPT-J's).
# Each: (least parameters, the roles of the first ones, the parameters it may take after them, by name).
FORMS = {
    "two": (4, (), ()),
    "one": (3, ("q", "cos", "sin"), ("unsqueeze_dim",)),
    "one_seq_major": (3, ("x_seq_major", "sin", "cos"), ()),
}


def _call(fn: Callable, form: str, q, k, cos, sin):
    """fn's (q_embed, k_embed) called in `form` on heads-major q and k."""
    if form == "two":
        return fn(q, k, cos, sin)
    if form == "one":
        return fn(q, cos, sin), fn(k, cos, sin)
    return tuple(fn(x.transpose(1, 2), sin, cos).transpose(1, 2) for x in (q, k))


def _answer(fn: Callable, q, k, theta, form: str):
    """fn's (q_embed, k_embed) for cos and sin of `theta`, called in `form`; None when it raises or answers anything
    else."""
    import torch

    try:
        with torch.no_grad():
            got = _call(fn, form, q, k, theta.cos(), theta.sin())
    except Exception:  # not a function of (q, k, cos, sin) of these widths
        return None
    if isinstance(got, tuple) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got):
        return got
    return None


class Recognised(NamedTuple):
    variant: str
    # the function's parameters -> the wrapper's where it rotates one tensor ((x, cos, sin[, unsqueeze_dim]) as
    # Gemma 3n's and Gemma 4's: {"x": "q", ...}; GPT-J's (tensor, sin, cos): {"tensor": "x_seq_major", ...}); {}
    # where it takes (q, k, cos, sin[, unsqueeze_dim]) by position
    roles: dict[str, str]


def _positional(fn: Callable) -> list | None:
    try:
        return [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return None


def recognise_call(fn: Callable) -> Recognised | None:
    """What `fn` computes and how it is called, found by calling it on probe tensors: as fn(q, k, cos, sin), or
    where it takes one tensor, as fn(x, cos, sin) or (GPT-J's) fn(x, sin, cos) on x of (batch, seq, heads, dim),
    attention calling it for q, then for k (`FORMS`). None when it computes none of the variants (or cannot be
    called so).

    cos and sin half as wide as the head come first: a function that splits the head at cos's width (GPT-NeoX's,
    GLM's) computes a whole-head variant too where cos is as wide as the head, but its model may call it with a
    narrower cos, which only the partial variant's kernel takes; a whole-head function cannot take them (it
    raises). Then one angle a pair, half the head wide (GPT-OSS's), then half-split (cat(f, f)) and interleaved
    (each angle twice in a row) cos and sin as wide as the head."""
    fn = plain_function(fn) or fn  # a hub-kernel function module (transformers 5.25 with `kernels`): its function
    params = _positional(fn)
    if params is None:
        return None
    required = [p for p in params if p.default is p.empty]
    for form, (least, first, then) in FORMS.items():
        if len(params) < least or len(required) > least:
            continue
        variant = _variant(fn, form)
        if variant is None:
            continue
        names = [p.name for p in params]
        roles = dict(zip(names, first, strict=False))
        roles.update({name: name for name in names[len(first) :] if name in then})  # any other: no role, no contract
        return Recognised(variant, roles)
    return None


def _variant(fn: Callable, form: str) -> str | None:
    import torch

    q, k, angles = _probe()
    quarter = angles[..., : angles.shape[-1] // 2]
    trials = (  # (cos and sin's angles, the variants they tell apart, whether the function may refuse them)
        (torch.cat((quarter, quarter), dim=-1), PARTIAL_VARIANTS, True),
        (angles, ANGLE_VARIANTS, True),  # one angle a pair (GPT-OSS's); a function of cos as wide as the head raises
        # (a pairs function that cannot split the head, Helium's, is the partial one's at cos as wide as the head)
        (torch.cat((angles, angles), dim=-1), ("rope_half", "rope_pairs_partial"), False),
        (torch.repeat_interleave(angles, 2, dim=-1), ("rope_interleaved",), False),
    )
    for theta, variants, may_refuse in trials:
        got = _answer(fn, q, k, theta, form)
        if got is None:
            if may_refuse:
                continue
            return None  # not a function of (q, k, cos, sin) in this form: not this family's
        for variant in variants:
            want = _reference(variant)(q, k, theta.cos(), theta.sin())
            if all(
                g.shape == w.shape and torch.allclose(g, w, atol=1e-5, rtol=1e-5)
                for g, w in zip(got, want, strict=True)
            ):
                return variant
    return None


def recognise_function(fn: Callable) -> str | None:
    """The variant `fn` computes (`recognise_call`), None when none."""
    found = recognise_call(fn)
    return found.variant if found else None


def recognised_functions(module) -> dict[str, Recognised]:
    """The function family's recognition, as the registry asks it (services.ops.functions_in)."""
    return find_ropes(module)


def find_ropes(module) -> dict[str, Recognised]:
    """{"package.module.function": what it computes and how it is called} for every function defined in the Python
    module `module` (a model's modeling file) that computes a rotary embedding."""
    found = {}
    for name, member in inspect.getmembers(module):
        fn = plain_function(member)  # a hub-kernel function module (transformers 5.25 with `kernels`): its function
        if fn is None:
            continue
        fn = inspect.unwrap(fn)  # a kernel swapped in is recognised as the function it replaced (`__wrapped__`)
        if fn.__module__ != module.__name__:
            continue  # imported from elsewhere: its own module's function
        recognised = recognise_call(fn)
        if recognised:
            found[f"{module.__name__}.{name}"] = recognised
    return found


def find_functions(module) -> dict[str, str]:
    """{"package.module.function": variant} of `find_ropes`."""
    return {path: found.variant for path, found in find_ropes(module).items()}


def live_state(model, roles=None) -> list[dict]:
    """The served model's rotary frequencies, for the profile (services.server.live_parameters): every module holding
    an `inv_freq` (transformers' rotary embeddings; two where local and global layers differ, Gemma 3's), its inverse
    frequencies in float32 and the factor its cos and sin are scaled by (YaRN's attention factor; 1 for most)."""
    import torch

    out = []
    for module in model.modules():
        inv = getattr(module, "inv_freq", None)
        if isinstance(inv, torch.Tensor) and inv.dim() == 1 and inv.is_floating_point():
            scaling = float(getattr(module, "attention_scaling", 1.0) or 1.0)
            out.append({"inv_freq": inv.float(), "attention_scaling": torch.tensor([scaling], dtype=torch.float32)})
    return out


def recognise(module) -> str | None:
    """A module instance is never this family's (its target is a function): None, for services.ops.recognise."""
    return None


# ---------------------------------------------------------------- launch plans and the wrapper

_GRID = re.compile(r"^(?:(2 \* )?positions|cdiv\(positions, (\d{1,3})\) \* heads)$")


def _constexpr_value(name: str, text: str) -> int | str:
    if text in CONSTEXPR_EXPRS:
        return text
    if re.fullmatch(r"\d{1,4}", text) and int(text) <= MAX_HEAD_DIM:
        return int(text)
    raise PlanError(f"constexpr {name}={text!r} is neither an integer literal nor one of {', '.join(CONSTEXPR_EXPRS)}")


def _parse_grid(text: str) -> tuple[int, int]:
    """(programs per unit, positions per unit): a unit is a position (1 or 2 programs), or a block of N positions
    (a program per head of q and k: 0 here, the call's head count)."""
    match = _GRID.match(text)
    block = int(match.group(2)) if match and match.group(2) else 1
    if not match or not 1 <= block <= MAX_POSITIONS:
        raise PlanError(f"grid {text!r} is not one of {', '.join(GRIDS)} (N 1..{MAX_POSITIONS})")
    return (0 if match.group(2) else 2 if match.group(1) else 1), block


def positions_per_program(plan: pb.LaunchPlan) -> int:
    """The most positions one program of a checked plan rotates together (a block's N; 1 where a program is a
    position): the judge's prefill of recurring tokens spans two such blocks (services.ops.rotary.cases)."""
    return max((_parse_grid(launch.grid)[1] for launch in plan.launches), default=1)


def _grid_mismatch(launch: pb.KernelLaunch) -> str:
    """Why a launch's grid and its kernel's POSITIONS and TOGETHER disagree ("" when they agree): a grid over
    blocks of N positions launches a kernel told POSITIONS = N and not TOGETHER; a grid over positions one told
    nothing or 0, with a program a position for both tensors (TOGETHER) or two (not)."""
    _, block = _parse_grid(launch.grid)
    told, together = launch.constexprs.get("POSITIONS", "0"), launch.constexprs.get("TOGETHER", "0") != "0"
    if told != (str(block) if "cdiv" in launch.grid else "0"):
        return f"grid {launch.grid!r} with POSITIONS={told}: a grid over blocks of N positions sets POSITIONS = N"
    if told != "0" and together:
        return "a program per head at a block of positions rotates q's or k's head, not both (TOGETHER 0)"
    if told == "0" and together != (launch.grid == "positions"):
        return (
            f"grid {launch.grid!r} with TOGETHER={int(together)}: a program a position rotates both tensors "
            "(grid positions, TOGETHER 1) or one (grid 2 * positions, TOGETHER 0)"
        )
    return ""


# A plan may dispatch by position count (batch · seq): its first launch serves calls of at most `max_rows`
# positions, the second the rest (decode-sized calls want other programs than prefill-sized ones: a program per
# head at 16 positions led at 1-4,096 positions on the H200, one per position rotating q and k at 32,768). The
# judge draws positions at and past the limit; this far a GPU reaches in one case.
MAX_DISPATCH_POSITIONS = 8192


def check_plan(plan: pb.LaunchPlan, kernels: Mapping) -> list[pb.Finding]:
    """Findings (rule `launch-plan`) for a plan of this family; [] when it fits: one launch serving every call, or
    two dispatching by position count (the first's `max_rows` positions at most, the second the rest), each
    launch's grid agreeing with its kernel's constexprs, both passing the same arguments."""
    try:
        if plan.family != FAMILY:
            raise PlanError(f"the plan is for family {plan.family!r}, this wrapper is {FAMILY!r}")
        limits = [launch.max_rows for launch in plan.launches]
        if limits != [0] and not (len(limits) == 2 and limits[1] == 0 and 1 <= limits[0] <= MAX_DISPATCH_POSITIONS):
            raise PlanError(
                f"a {FAMILY} plan is one launch serving every call (max_rows 0), or two dispatching by position "
                f"count (the first's max_rows 1..{MAX_DISPATCH_POSITIONS}, the last's 0): max_rows {limits}"
            )
        if len({tuple(launch.args) for launch in plan.launches}) > 1:
            raise PlanError("a dispatch's launches pass the same runtime arguments (one output layout for both)")
        told = {launch.constexprs.get(ANGLES, "0") for launch in plan.launches}
        if not told <= {"0", "1"} or len(told) > 1:
            raise PlanError(f"{ANGLES} is 0 or 1 (cos of one angle a pair), the same in every launch: {sorted(told)}")
        for launch in plan.launches:
            check_launch(launch, kernels, args=ARGS, grid=_parse_grid, value=_constexpr_value)
            mismatch = _grid_mismatch(launch)
            if mismatch:
                raise PlanError(mismatch)
    except PlanError as exc:
        return [pb.Finding(rule_id="launch-plan", reason=str(exc))]
    return []


def _check(q, k, cos, sin, partial: bool = False, angles: bool = False) -> tuple[tuple[int, ...], ...]:
    """The shapes and strides of q, k and cos where the four fit the wrapper; raises with what does not. On every
    call of the op: each shape and stride is read once (a decode step's host time is mostly this kind of work)."""
    import torch

    tensor = torch.Tensor
    if not (isinstance(q, tensor) and isinstance(k, tensor) and isinstance(cos, tensor) and isinstance(sin, tensor)):
        raise TypeError("rope takes tensors for q, k, cos and sin")
    qs, ks, cs = q.shape, k.shape, cos.shape
    if len(qs) != 4 or len(ks) != 4 or len(cs) != 3 or sin.shape != cs:
        raise ValueError(
            f"rope takes q and k of (batch, heads, seq, head_dim) and cos, sin of (batch, seq, head_dim); got q "
            f"{tuple(qs)}, k {tuple(ks)}, cos {tuple(cs)}, sin {tuple(sin.shape)}"
        )
    b, _, s, d = qs
    r = 2 * cs[2] if angles else cs[2]  # the rotary width: the head's, or (a partial plan) at most it
    fits = r == d or (partial and r <= d)
    if ks[0] != b or ks[2] != s or ks[3] != d or cs[0] not in (1, b) or cs[1] != s or not fits:
        raise ValueError(f"q {tuple(qs)}, k {tuple(ks)} and cos {tuple(cs)} do not fit together")
    if d % 2 or r % 2 or not r or d > MAX_HEAD_DIM:
        raise ValueError(f"head_dim {d} and rotary width {r} must be even, and at most {MAX_HEAD_DIM}")
    qt, kt, ct = q.stride(), k.stride(), cos.stride()
    if qt[3] != 1 or kt[3] != 1 or ct[2] != 1 or sin.stride() != ct:
        raise ValueError("q, k, cos and sin must be contiguous in head_dim, and cos and sin laid out alike")
    device = q.device
    if k.device != device or cos.device != device or sin.device != device or q.dtype != k.dtype:
        raise TypeError("q, k, cos and sin must be on one device, q and k of one dtype")
    return qs, ks, cs, qt, kt, ct


class _RopeLaunch(NamedTuple):
    most: int | None  # the positions it serves at most (a dispatch's first launch); None: any
    launcher: Launcher
    constexprs: dict  # name -> an integer, or a CONSTEXPR_EXPRS name resolved per call's sizes
    per_unit: int  # programs per unit of positions; 0: one per head of q and k
    block: int  # positions per unit
    args: tuple[str, ...]


def make_op(plan: pb.LaunchPlan, kernels: Mapping[str, Callable], *, empty=None, launch: bool = True) -> Callable:
    """rope(q, k, cos, sin, unsqueeze_dim=1) -> (q_embed, k_embed) with the plan's kernel (checked by
    `check_plan`). `unsqueeze_dim` 1: q and k of (batch, heads, seq, head_dim), what most HF callers pass; 2: of
    (batch, seq, heads, head_dim) (cos and sin broadcast over the heads either way). Without k it rotates q
    alone and returns its output (a function of one tensor: the same launch with k of no heads); `x_seq_major`
    is such a q of (batch, seq, heads, head_dim) (GPT-J's tensor)."""
    import torch

    # FMA contraction off: the HF functions round each product before the sum (torch's separate ops), and a fused
    # multiply-add skips that rounding — on the H200 a quarter of bf16 outputs came out one ulp off with it on,
    # none with it off. The family decides this, not the candidate: its plan cannot turn it back on.
    launches = [
        _RopeLaunch(
            launch.max_rows or None,
            Launcher(kernels[launch.kernel], {**launch_options(launch), "enable_fp_fusion": False}),
            {name: _constexpr_value(name, text) for name, text in sorted(launch.constexprs.items())},
            *_parse_grid(launch.grid),
            tuple(launch.args),
        )
        for launch in plan.launches
    ]
    allocate = empty or torch.empty
    strided = any(a in OUT_STRIDES for a in launches[0].args)
    partial = any(v in PARTIAL_EXPRS for v in launches[0].constexprs.values())
    angles = launches[0].constexprs.get(ANGLES) == 1

    def output(x, shape, stride, dtype):
        """x's output: in x's (batch, seq, heads, head_dim) memory where x is laid out so and the plan says where
        to write (its output strides), contiguous (batch, heads, seq, head_dim) otherwise."""
        b, h, s, d = shape
        if strided and stride[1] == d and stride[2] == h * d and stride[0] == s * h * d:
            return allocate((b, s, h, d), dtype=dtype, device=x.device).transpose(1, 2)
        return allocate(shape, dtype=dtype, device=x.device)

    # (launch, q heads, k heads, head dim, rotary width) -> that launch's constexprs
    sizes: dict[tuple[int, int, int, int, int], dict] = {}

    def constexpr_values(index: int, hq: int, hk: int, d: int, r: int) -> dict:
        exprs = {"half": d // 2, "block_half": next_pow2(d // 2), "block_heads_q": next_pow2(hq),
                 "block_heads_k": next_pow2(hk), "rot_half": r // 2, "block_rot_half": next_pow2(r // 2),
                 "pass": d - r, "block_pass": next_pow2(max(d - r, 1))}  # fmt: skip
        return {n: exprs[v] if isinstance(v, str) else v for n, v in launches[index].constexprs.items()}

    def rope(q=None, k=None, cos=None, sin=None, unsqueeze_dim: int = 1, x_seq_major=None):
        if x_seq_major is not None:  # one tensor of (batch, seq, heads, dim) (GPT-J's): q's layout at unsqueeze_dim 2
            return rope(x_seq_major, None, cos, sin, 2)
        if k is None:  # one tensor (Gemma 4's apply_rotary_pos_emb(x, cos, sin)): k of no heads, q's output alone
            if not isinstance(q, torch.Tensor) or q.dim() != 4:
                raise ValueError(f"rope of one tensor takes x of 4 dims, got {getattr(q, 'shape', type(q))}")
            return rope(q, q[:, :, :0] if unsqueeze_dim == 2 else q[:, :0], cos, sin, unsqueeze_dim)[0]
        if unsqueeze_dim == 2:
            if isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and q.dim() == k.dim() == 4:
                # q and k of (batch, seq, heads, head_dim) (DeepSeek-V3.2's indexer, HunYuan v4): rotated as their
                # (batch, heads, seq, head_dim) views, the outputs given back in the caller's order
                q_out, k_out = rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
                return q_out.transpose(1, 2), k_out.transpose(1, 2)
            _check(q, k, cos, sin, partial, angles)  # not two 4-D tensors: raises with what does not fit
        if unsqueeze_dim != 1:
            raise ValueError(f"rope broadcasts cos and sin over the heads (unsqueeze_dim 1 or 2), not {unsqueeze_dim}")
        qs, ks, cs, qt, kt, ct = _check(q, k, cos, sin, partial, angles)
        b, hq, s, d = qs
        dtype = q.dtype if cos.dtype == q.dtype else torch.promote_types(q.dtype, cos.dtype)
        q_out = output(q, qs, qt, dtype)
        k_out = output(k, ks, kt, dtype) if ks[1] else q_out[:, :0]  # no heads: a view, never a null pointer
        positions = b * s
        if positions and launch:
            qo, ko = q_out.stride(), k_out.stride()
            values = {
                "q": q, "k": k, "cos": cos, "sin": sin, "q_out": q_out, "k_out": k_out, "positions": positions,
                "seq": s, "heads_q": hq, "heads_k": ks[1], "q_sb": qt[0], "q_sh": qt[1], "q_ss": qt[2],
                "k_sb": kt[0], "k_sh": kt[1], "k_ss": kt[2], "c_sb": ct[0] if cs[0] == b else 0, "c_ss": ct[1],
                "qo_sb": qo[0], "qo_sh": qo[1], "qo_ss": qo[2], "ko_sb": ko[0], "ko_sh": ko[1], "ko_ss": ko[2],
            }  # fmt: skip
            index = next(i for i, one in enumerate(launches) if one.most is None or positions <= one.most)
            one = launches[index]
            size = (index, hq, ks[1], d, cs[2])
            if size not in sizes:
                sizes[size] = constexpr_values(*size)
            programs = (one.per_unit or hq + ks[1]) * -(-positions // one.block)
            one.launcher(programs, [values[a] for a in one.args], sizes[size])
        return q_out, k_out

    rope.launchers = [one.launcher for one in launches]
    return rope


make_forward = make_op  # a function target's wrapper is the op itself (services.core.kernels.candidate_wrapper)

ENTRY_PARAMS = ("q", "k", "cos", "sin", "unsqueeze_dim", "x_seq_major")
# what a function of one tensor's parameters may be, in order: a form's first roles, then what it may take after
ONE_TENSOR_ENTRIES = tuple(
    [*first, *then[:n]] for _, first, then in FORMS.values() if first for n in range(len(then) + 1)
)


def function_contract(target: str, params, roles: Mapping[str, str] | None = None) -> pb.Contract | None:
    """The function contract of a recognised RoPE function: its parameters are the wrapper's, by position (its
    own names mapped to the wrapper's), or by the `roles` recognition found (a function of one tensor); None when
    it takes other parameters than (q, k, cos, sin[, unsqueeze_dim]), or a parameter has no role."""
    params = list(params)
    if roles:
        entry = [roles.get(name, "") for name in params]
        if entry not in ONE_TENSOR_ENTRIES:
            return None
    elif not 4 <= len(params) <= 5:
        return None
    else:
        entry = list(ENTRY_PARAMS[: len(params)])  # (q, k, cos, sin[, unsqueeze_dim])
    return pb.Contract(
        kind=KIND, target=target, entrypoint=ENTRYPOINT, inputs=params, entry_inputs=entry if params != entry else []
    )


def one_tensor(contract: pb.Contract) -> bool:
    """Whether a function contract's function rotates one tensor (its entry names no k)."""
    entry = list(contract.entry_inputs) or list(contract.inputs)
    return entry in ONE_TENSOR_ENTRIES


def heads_major(shape, cos_shape) -> tuple[int, ...]:
    """q's or k's live shape (as a profile recorded it) as (batch, heads, seq, head_dim). A caller passing
    unsqueeze_dim=2 passes them as (batch, seq, heads, head_dim), told apart by cos ((batch, seq, width)): its seq
    is the second dim and not the third. A shape that does not say so is returned as it is."""
    shape, cos_shape = tuple(int(x) for x in shape), tuple(int(x) for x in cos_shape)
    if len(shape) == 4 and len(cos_shape) == 3 and shape[1] == cos_shape[1] != shape[2]:
        return shape[0], shape[2], shape[1], shape[3]
    return shape


def live_rotary_dim(cos_shape, head_dim: int) -> int:
    """The rotary width a profile's recorded cos shape (`third_shape`: (batch, seq, width)) says the live calls
    rotate, where narrower than the head; 0 where as wide as the head or not recorded (a profile before schema 8)."""
    cos_shape = tuple(int(x) for x in cos_shape)
    return cos_shape[-1] if len(cos_shape) == 3 and 0 < cos_shape[-1] < head_dim else 0


def bytes_moved(q_elements: int, k_elements: int, cos_elements: int, itemsize: int) -> int:
    """Bytes one call must move at least: q and k read and written, cos and sin read."""
    return (2 * (q_elements + k_elements) + 2 * cos_elements) * itemsize


def timed_bytes(dims: list[int], itemsizes: tuple[int, int, int]) -> int:
    """Bytes a call on a timed input must move: the judge packs q and k heads, then cos and sin, as one
    (batch, seq, heads + 2, head_dim) tensor (services.judge.sandbox_child._rope_oracle). Where only part of the
    head rotates, cos and sin are narrower than their slots and this counts the slots: at most 2 · (head_dim - rotary
    width) elements a position over, ~1.5% of a 34-head call at half of a 128 head, inside the timing check's slack."""
    b, s, heads, d = dims
    return bytes_moved(b * s * (heads - 2) * d, 0, b * s * d, itemsizes[0])
