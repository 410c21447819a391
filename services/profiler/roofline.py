"""Roofline physics of a profiled module class: op family, FLOPs and bytes, floor, fingerprint, ranking.

Pure functions of a `ProfileObservation`. The op family is read from what the server saw the forward
compute (it runs one instance on probe rows: services/ops/recognise_norm.py, recorded as `computes`)
and from structure and physics (parameter shapes, attribute kinds, bytes in and out), never from a
class name, so a new model's norm is found the same way as Qwen2's — and a LayerNorm shaped like an
RMSNorm (Cohere's) is not offered to the RMSNorm template. Profiles recorded before the probe existed
(`probed` false) are decided by structure, as they were. Fingerprints carry physics only: a skill learned
on one model is retrieved for another whose op moves the same kind of bytes.

Per-call bytes and FLOPs come from the profile's mean bytes per call (so calls × per-call is the
total moved); the fingerprint's rows and width come from the most frequent live shape (the typical call).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from services import ops
from services.core.pb import events_pb2 as pb
from services.profiler import catalogue

FAMILIES = ("row_reduction", "matmul", "elementwise", "gather", "other")
# The roofline classes a module-class family writes, as a recorded reason names them (services.profiler.domain):
# its words, kept. Which class a family writes is asked of the registry (`writable`).
SUPPORTED_FAMILIES = ("row_reduction",)

# FLOP per element: a norm squares, sums, scales and multiplies by the weight; an activation is ~1.
_FLOP_PER_ELEMENT = {"row_reduction": 4.0, "elementwise": 1.0}
# Where no hardware figures came with the profile: FLOP per byte above which an op is compute-bound
# (an H200 is ~185: 790 TFLOP/s over 4.3 TB/s).
DEFAULT_RIDGE = 100.0

_DTYPE_BYTES = {
    "float64": 8,
    "double": 8,
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int64": 8,
    "long": 8,
    "int32": 4,
    "int": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}
_INTEGER_DTYPES = {"int64", "long", "int32", "int", "int16", "int8", "uint8", "bool"}
# Index tensors an embedding takes: int64 (torch's default) or int32.
_INDEX_BYTES = (8, 4)

# Fingerprint vector layout, fixed length. The one-hot family is weighted so that two families are
# always farther apart (2·√2) than any two ops of one family (every other component lies in ~[0, 1]).
FAMILY_WEIGHT = 2.0
FINGERPRINT_DIM = len(FAMILIES) + 6
_VECTOR_DECIMALS = 6  # rounded so libm differences across machines cannot change a replayed vector


def _dtype_key(dtype: str) -> str:
    return dtype.strip().lower().removeprefix("torch.")


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name ("bfloat16", "torch.float32"); 0 when unknown."""
    return _DTYPE_BYTES.get(_dtype_key(dtype), 0)


def is_integer_dtype(dtype: str) -> bool:
    return _dtype_key(dtype) in _INTEGER_DTYPES


def _parameters(profile: pb.ModuleClassProfile) -> list[pb.ModuleAttribute]:
    return [a for a in profile.introspection.attributes if a.kind == "parameter"]


def _row_width(profile: pb.ModuleClassProfile) -> int:
    return int(profile.input_shape[-1]) if profile.input_shape else 0


def _numel(shape) -> int:
    return math.prod(int(d) for d in shape) if len(shape) else 0


def _gathers_rows(profile: pb.ModuleClassProfile, weight: pb.ModuleAttribute) -> bool:
    """Each input element selects one weight row: output bytes = input elements × row bytes.

    Both byte counts are means over calls, so compare their ratio (exact whatever the shapes were),
    allowing 1% for the rounding of the means.
    """
    if profile.input_bytes == 0 or profile.output_bytes == 0 or len(weight.shape) != 2:
        return False
    row_bytes = int(weight.shape[1]) * (dtype_bytes(weight.dtype) or dtype_bytes(profile.dtype))
    for index_bytes in _INDEX_BYTES:
        expected = profile.input_bytes / index_bytes * row_bytes
        if expected and abs(profile.output_bytes - expected) <= 0.01 * expected:
            return True
    return False


def op_family(profile: pb.ModuleClassProfile) -> str:
    """The op family from what the forward was seen computing, structure and physics (see FAMILIES)."""
    if not profile.introspection.leaf:
        return "other"  # a container's time is its children's; its physics is theirs
    owner = ops.family_of(profile.computes)
    if owner and ops.family(owner).KIND != "layer":  # recognised by running it: its family says its roofline class
        return ops.physics(owner).ROOFLINE  # (any norm: row_reduction; a modeling file's RoPE: elementwise)
    params = _parameters(profile)
    width = _row_width(profile)
    same_bytes = profile.input_bytes > 0 and profile.output_bytes == profile.input_bytes
    has_float_attribute = any(a.kind == "float" for a in profile.introspection.attributes)
    shaped_like_a_norm = len(params) == 1 and list(params[0].shape) == [width] and width > 0
    # Shaped like a norm but seen computing none of the norms (probed): not a row reduction we know.
    if shaped_like_a_norm and has_float_attribute and same_bytes and not profile.probed:
        return "row_reduction"
    matrices = [p for p in params if len(p.shape) == 2]
    if len(matrices) == 1 and all(len(p.shape) <= 1 for p in params if p is not matrices[0]):
        weight = matrices[0]
        if width != int(weight.shape[1]) and (is_integer_dtype(profile.dtype) or _gathers_rows(profile, weight)):
            return "gather"
        if width == 0 or width in (int(weight.shape[0]), int(weight.shape[1])):
            return "matmul"
        return "other"
    if not params and same_bytes:
        return "elementwise"
    return "other"


@dataclass(frozen=True)
class CallPhysics:
    """What one (mean) call of a module class computes and moves."""

    family: str
    flops: float
    bytes: float
    row_width: int
    rows: int
    dtype_bytes: int

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes > 0 else 0.0


def _data_dtype_bytes(profile: pb.ModuleClassProfile) -> int:
    """Bytes per element of the data the op computes on (an embedding's rows, not its index input)."""
    if is_integer_dtype(profile.dtype):
        floating = [p for p in _parameters(profile) if dtype_bytes(p.dtype) and not is_integer_dtype(p.dtype)]
        return dtype_bytes(floating[0].dtype) if floating else dtype_bytes(profile.dtype)
    known = dtype_bytes(profile.dtype)
    if known:
        return known
    numel = _numel(profile.input_shape)
    return round(profile.input_bytes / numel) if numel and profile.input_bytes else 0


def call_physics(profile: pb.ModuleClassProfile) -> CallPhysics:
    family = op_family(profile)
    width = _row_width(profile)
    numel = _numel(profile.input_shape)
    rows = numel // width if width else 0
    elem = _data_dtype_bytes(profile)
    # elements per mean call, from the mean bytes (the most frequent shape alone would miss prefill)
    elements = profile.input_bytes / elem if elem else float(numel)
    flops = 0.0
    moved = float(profile.input_bytes + profile.output_bytes + profile.param_bytes)
    if family in _FLOP_PER_ELEMENT:
        flops = _FLOP_PER_ELEMENT[family] * elements
    elif family == "matmul" and width:
        weight = next(p for p in _parameters(profile) if len(p.shape) == 2)
        w0, w1 = int(weight.shape[0]), int(weight.shape[1])
        out_features = w0 if w1 == width else w1  # [out, in] (nn.Linear) or [in, out] (GPT-2 Conv1D)
        flops = 2.0 * elements * out_features  # 2 · rows · in · out, with rows · in = elements
    elif family == "gather":
        # only the selected rows are read, not the whole table: read them, write them, read the ids
        moved = float(profile.input_bytes + 2 * profile.output_bytes)
    return CallPhysics(family, flops, moved, width, rows, elem)


def ridge(hw: pb.HardwareFigures) -> float:
    if hw.peak_flops > 0 and hw.peak_bytes_per_s > 0:
        return hw.peak_flops / hw.peak_bytes_per_s
    return DEFAULT_RIDGE


def floor_us(phys: CallPhysics, calls: int, hw: pb.HardwareFigures) -> float:
    """The roofline floor for `calls` calls: each at least its bytes at the copy ceiling or its FLOPs at peak."""
    per_call_s = max(
        phys.bytes / hw.peak_bytes_per_s if hw.peak_bytes_per_s > 0 else 0.0,
        phys.flops / hw.peak_flops if hw.peak_flops > 0 else 0.0,
    )
    return calls * per_call_s * 1e6


def achieved_fraction(
    phys: CallPhysics, profile: pb.ModuleClassProfile, hw: pb.HardwareFigures, time_us: float | None = None
) -> float:
    """Bytes per second the eager op achieved (in `time_us`, the class's whole time by default), over the copy
    ceiling."""
    time_us = profile.total_time_us if time_us is None else time_us
    if time_us <= 0 or hw.peak_bytes_per_s <= 0:
        return 0.0
    return phys.bytes * profile.calls / (time_us * 1e-6) / hw.peak_bytes_per_s


def fingerprint_vector(
    family: str,
    intensity: float,
    row_width: int,
    rows: int,
    dtype_bytes_: int,
    memory_bound: bool,
    achieved: float,
) -> list[float]:
    """The retrieval embedding: one-hot family, then log-scaled physics, each scaled to about [0, 1]."""
    onehot = [FAMILY_WEIGHT if family == f else 0.0 for f in FAMILIES]
    physics = [
        math.log2(1.0 + max(intensity, 0.0)) / 8.0,  # FLOP/B: 0 → 0, ~255 → 1
        math.log2(max(row_width, 1)) / 16.0,  # 65,536 wide → 1
        math.log2(max(rows, 1)) / 16.0,  # 65,536 rows → 1
        dtype_bytes_ / 4.0,  # fp32 → 1, bf16 → 0.5
        0.5 if memory_bound else 0.0,
        0.5 * min(max(achieved, 0.0), 1.0),
    ]
    return [round(x, _VECTOR_DECIMALS) for x in onehot + physics]


def fingerprint(profile: pb.ModuleClassProfile, hw: pb.HardwareFigures, phys: CallPhysics | None = None,
                time_us: float | None = None) -> pb.Fingerprint:  # fmt: skip
    """The physics of the class's op: its own calls, or (`phys`, `time_us`) the op a layer rewrite fuses."""
    phys = phys or call_physics(profile)
    memory_bound = phys.intensity < ridge(hw)
    achieved = achieved_fraction(phys, profile, hw, time_us)
    return pb.Fingerprint(
        op_family=phys.family,
        memory_bound=memory_bound,
        arithmetic_intensity=phys.intensity,
        row_width=phys.row_width,
        rows=phys.rows,
        dtype_bytes=phys.dtype_bytes,
        achieved_fraction=achieved,
        vector=fingerprint_vector(
            phys.family, phys.intensity, phys.row_width, phys.rows, phys.dtype_bytes, memory_bound, achieved
        ),
    )


@dataclass(frozen=True)
class LayerOp:
    """The op a layer rewrite fuses, inside a layer's forward: its physics, calls, and the time it took (the layer's
    time outside the children the rewrite keeps)."""

    physics: CallPhysics
    time_us: float
    kept_us: float
    computes: str


def layer_op(profile: pb.ModuleClassProfile) -> LayerOp | None:
    """The op a layer rewrite fuses, seen inside its layer (its roles recorded by the server), or None: a gated
    MLP's act(gate) * up, a plain MLP's activation, or a decoder layer's residual add and post norm.

    Its time is the layer's minus the children the rewrite keeps (a gated MLP's three projections; a decoder
    layer's input norm, attention and MLP) and minus the profiler's own hooks on its children: what the rewrite
    replaces, the forward's own host work included. Its bytes are what the fused op must move per mean call,
    from the layer's mean input bytes."""
    if profile.introspection.leaf or not profile.roles:
        return None
    owner = ops.family_of(profile.computes)
    if not owner or ops.family(owner).KIND != "layer":
        return None
    fam, cost_of = ops.family(owner), ops.physics(owner)
    children = {c.name: tuple(c.shape) for c in profile.introspection.children}
    kept_roles = cost_of.kept_roles(profile.roles)
    shapes = {role: children.get(profile.roles.get(role, ""), ()) for role in cost_of.shape_roles(profile.roles)}
    elem = _data_dtype_bytes(profile)
    if fam.roles_problem(shapes) or not elem:
        return None
    kept = sum(profile.child_time_us.get(profile.roles[role], 0.0) for role in kept_roles)
    time_us = max(profile.total_time_us - kept - profile.child_hook_us, 0.0)
    cost = cost_of.layer_cost(profile, shapes, elem)
    if cost is None:
        return None
    physics = CallPhysics(cost.roofline, cost.flops, cost.bytes, cost.width, cost.rows, elem)
    return LayerOp(physics, time_us, kept, profile.computes)


def writable(profile: pb.ModuleClassProfile, family: str, can_write: dict[str, tuple[str, ...]] | None = None) -> bool:
    """Whether a template writes this class: its family has one and, when its forward was probed, the template
    writes what it computes (a LayerNorm is a row reduction the RMSNorm template must not be offered). `can_write`:
    the catalogue the profile is ranked against (services.profiler.catalogue; the frozen one by default)."""
    can_write = catalogue.FROZEN if can_write is None else can_write
    owner = ops.family_of(profile.computes)
    if owner and ops.family(owner).KIND == "function":  # a function target: its family writes what it computes
        return profile.computes in can_write.get(owner, ())
    # the module-class family of that roofline class (the norms') writes it where it writes what it was seen computing
    module_families = [f for f in ops.FAMILIES.values() if f.KIND == "module_class"]
    writer = next((f for f in module_families if ops.physics(f.FAMILY).ROOFLINE == family), None)
    if writer is None:
        return False
    return not profile.probed or profile.computes in can_write.get(writer.FAMILY, ())


def _note(fp: pb.Fingerprint, calls: int, supported: bool, hw: pb.HardwareFigures, computes: str = "") -> str:
    bound = "memory-bound" if fp.memory_bound else "compute-bound"
    parts = [f"{fp.op_family}, {bound} at {fp.arithmetic_intensity:.2f} FLOP/B, {calls} calls"]
    if hw.peak_bytes_per_s > 0:
        parts.append(f"{fp.achieved_fraction:.2%} of copy bandwidth achieved")
    else:
        parts.append("no copy ceiling in the profile, so no floor")
    if computes:
        parts.append(f"computes {computes} (seen running it)")
    if not supported:
        parts.append(f"no template for {computes or fp.op_family}")
    return "; ".join(parts)


def rank(obs: pb.ProfileObservation) -> list[pb.RankedTarget]:
    """Leaf module classes, and layers an op family rewrites, by recoverable time, most first (ties by class path).

    Leaves, and of a layer only its time outside the children its rewrite keeps: a container's inclusive time
    contains its children's, so ranking it whole would count the same microseconds twice. (A layer's activation
    child is also ranked as a leaf of its own class; no template writes an activation alone.)
    """
    hw = obs.hardware
    can_write = catalogue.of(obs)
    out = []
    for profile in obs.modules:
        if profile.calls == 0:
            continue
        op = layer_op(profile)
        if op is not None:
            out.append(_layer_target(profile, op, obs, hw, can_write))
            continue
        if not profile.introspection.leaf:
            continue
        fp = fingerprint(profile, hw)
        floor = floor_us(call_physics(profile), profile.calls, hw)
        supported = writable(profile, fp.op_family, can_write)
        out.append(
            pb.RankedTarget(
                class_path=profile.introspection.class_path,
                time_share=profile.total_time_us / obs.captured_time_us if obs.captured_time_us > 0 else 0.0,
                floor_us=floor,
                recoverable_us=max(profile.total_time_us - floor, 0.0),
                fingerprint=fp,
                supported=supported,
                note=_note(fp, profile.calls, supported, hw, profile.computes),
            )
        )
    out.sort(key=lambda t: (-t.recoverable_us, t.class_path))
    return out


def _layer_target(
    profile: pb.ModuleClassProfile, op: LayerOp, obs: pb.ProfileObservation, hw, can_write: dict
) -> pb.RankedTarget:
    fp = fingerprint(profile, hw, op.physics, op.time_us)
    floor = floor_us(op.physics, profile.calls, hw)
    family = ops.family(ops.family_of(op.computes))
    supported = op.computes in can_write.get(family.FAMILY, ())
    note = _note(fp, profile.calls, supported, hw, op.computes)
    kept = ops.physics(family.FAMILY).KEPT
    note += (
        f"; a layer: {op.time_us:,.0f} us of its {profile.total_time_us:,.0f} us outside {kept} it keeps "
        f"({family.FAMILY} rewrite)"
    )
    return pb.RankedTarget(
        class_path=profile.introspection.class_path,
        time_share=op.time_us / obs.captured_time_us if obs.captured_time_us > 0 else 0.0,
        floor_us=floor,
        recoverable_us=max(op.time_us - floor, 0.0),
        fingerprint=fp,
        supported=supported,
        note=note,
    )
