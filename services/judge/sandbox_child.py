"""The sandbox child: `python -m services.judge.sandbox_child` (started by sandbox.py, job on stdin).

Reads the job from stdin (there is no job file to find), raises its walls (services.judge.
sandbox_walls), imports what the judge needs, snapshots what must not be patched, then loads the
candidate's kernels behind its op family's wrapper, runs the parent's cases (services.judge.run_cases),
times it on a GPU (or stresses it on CPU), runs the first cases again, and writes the outputs to
`outputs.pt` and its answer (facts, timing figures, walls) to an inherited, already unlinked file
descriptor. It decides nothing: the parent compares the outputs with references it computed itself
(services.judge.verdict). Whatever happens, it writes an answer.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from services.judge.sandbox import FIRST_PASS_FILE, JUDGE_CACHE, OUTPUTS_FILE
from services.judge.sandbox_walls import (
    AuditWall,
    WallReport,
    drop_root,
    enter_network_namespace,
    install_audit_wall,
    processes_allowed,
    set_limits,
)

CPU_STRESS_CALLS = 48  # CPU stands in for the GPU's timing calls with this many calls before the re-check


def _rows(shape: tuple[int, ...]) -> int:
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return rows


def _timing_shapes(job: dict, width: int) -> list[tuple[int, ...]]:
    """The live shape first, then one decode row and the GPU.md anchor sizes; one shape per row count."""
    live = tuple(int(d) for d in job["live_shape"]) or (1, width)
    if live[-1] != width:
        live = (1, width)
    by_rows: dict[int, tuple[int, ...]] = {}
    for shape in [live, (1, width), (4096, width), (32768, width)]:
        by_rows.setdefault(_rows(shape), shape)
    return list(by_rows.values())


def _oracle(cls, job: dict, width: int, device, seed: int):
    """A real instance of the live class: live dtype, live eps, random weights around 1 (not all ones)."""
    import torch

    from services.judge.module_factory import build, torch_dtype

    module = build(cls, width, job["eps"], job["eps_attr"], device)
    module = module.to(dtype=torch_dtype(job["param_dtype"])).eval()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            noise = torch.randn(param.shape, generator=gen).to(device=param.device, dtype=param.dtype)
            param.copy_(1 + 0.1 * noise)
    return module


def _prepare(job: dict):
    """Everything imported before the audit wall goes up (after it, the judge's own files are unreadable)."""
    import numpy  # noqa: F401  (the interpreter's, imported before the wall)
    import torch
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    from services.core import kernels  # noqa: F401
    from services.core.pb import events_pb2 as pb  # noqa: F401
    from services.judge import (  # noqa: F401
        add_norm_cases,  # noqa: F401
        cases,
        module_factory,
        poison,
        run_cases,
        tamper,
    )
    from services.ops import gated_mlp, plain_mlp, residual_norm, row_reduction  # noqa: F401

    if job["device"] == "cuda":
        import triton.testing  # noqa: F401

        from services.judge import timing  # noqa: F401
    else:  # interpreted: bf16 casts round to nearest, as compiled kernels' do
        from services.core import interpreter_rounding

        interpreter_rounding.install()
    torch.set_grad_enabled(False)
    if job.get("family") == "rotary":  # a function target: its module is the namespace the tamper check watches
        from services.judge import rope_cases  # noqa: F401
        from services.ops import rotary  # noqa: F401

        return module_factory.import_function(job["class_path"])[0]
    return module_factory.import_class(job["class_path"])


@contextmanager
def _judge_phase(wall: AuditWall | None, scratch: Path) -> Iterator[None]:
    """The judge's own work (compiling baselines): its caches open, Triton writing into them."""
    saved = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(scratch / JUDGE_CACHE / "triton")
    try:
        with wall.judge_phase() if wall is not None else nullcontext():
            yield
    finally:
        if saved is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = saved


def _time(main, candidate, job: dict, shapes, dtype, wall: AuditWall | None, tampered, namespaces, facts, state=()):
    """Prepare the baselines in a judge phase, snapshot again, then time with the poisoning lifted. `state`: what the
    candidate reads besides its input (the module's weight), bit-identical after the timing calls."""
    import secrets

    from services.core.pb import events_pb2 as pb
    from services.judge import tamper
    from services.judge.poison import POISON
    from services.judge.timing import ReplayMismatch, TimedInputModified, prepare_baselines, time_candidate

    try:
        with _judge_phase(wall, Path.cwd()):
            baselines = prepare_baselines(main, shapes, dtype, job["eps"])
        # torch.compile installs global hooks the first time it runs (dynamo patches nn.Module.__init__):
        # the snapshot the timing is checked against is taken after that, and after the candidate was
        # found untampered against the first one.
        before = tamper.snapshot(namespaces)
        with POISON.lifted():  # timing pays nothing for the poisoning
            # the timed inputs' contents come from a nonce of this judging (not the seed the parent records)
            timing = time_candidate(main, candidate, shapes, dtype, baselines, state, nonce=secrets.randbits(62))
    except TimedInputModified as exc:  # wrote its input or the weight in a call no case check saw
        facts.setdefault("call_problems", []).append({"rule": exc.rule, "detail": str(exc)})
        return pb.TimingEvidence(measured=False, reason=f"{exc.rule}: during the timing calls")
    except ReplayMismatch as exc:  # drifted once timing began, or fast only while captured: wrong, not slow
        facts["drift"] = f"right in the checks, wrong in the CUDA graph that was timed: {exc}"
        return pb.TimingEvidence(measured=False, reason="drift: the timed graph's answer was wrong")
    except Exception as exc:  # no figures, but the re-check still judges the candidate
        return pb.TimingEvidence(measured=False, reason=f"timing failed: {type(exc).__name__}: {exc}")
    if tampered("during timing", before):
        return pb.TimingEvidence(measured=False, reason="tampered: not believed")
    return timing


AFTER_CASES = 6  # cases run again after the timing (or stress) calls: a kernel right only at first is wrong
PRODUCTION = "called as production calls it"


class _NormSubject:
    """A module-class candidate (a norm): the live class's instances hold each case's weight (and bias); the
    candidate is called through its contract, as the server calls it."""

    def __init__(self, job: dict, cls, ops, plan, loaded, empty, contract, cases: dict, device):
        from services.core import kernels
        from services.core.pb import events_pb2 as pb
        from services.judge.module_factory import bias_binding, tensor_binding

        self.job, self.cls, self.contract, self.cases, self.device = job, cls, contract, cases, device
        self.wrapper = ops.make_forward(plan, loaded, empty=empty)
        self.call = kernels.bind(contract, self.wrapper)
        self.ghost_call = kernels.bind(contract, ops.make_forward(plan, loaded, empty=empty, launch=False))
        # The module's own attributes, as the parent names them (its oracle set the same); the candidate reads
        # whatever its contract binds. Cases written before the parent named them: the contract's.
        named = cases.get("state_attrs")
        self.weight_attr = named[0] if named else (tensor_binding(contract) or pb.Binding(attr="weight")).attr
        self.bias_attr = named[1] if named else (bias_binding(contract) or pb.Binding()).attr
        self.biases = cases.get("biases") or [None] * len(cases["bases"])
        self.modules: dict = {}
        self.count = len(cases["bases"])

    def _state(self, index: int) -> dict:
        """The case's module tensors by attribute: its weight, and its bias where the module has one."""
        out = {self.weight_attr: self.cases["weights"][index]}
        if self.bias_attr and self.biases[index] is not None:
            out[self.bias_attr] = self.biases[index]
        return out

    def _module(self, width: int):
        if width not in self.modules:
            self.modules[width] = _oracle(
                self.cls, self.job, width, self.device, seed=int(self.job["seed_base"]) + width
            )
        return self.modules[width]

    def _width(self, index: int) -> int:
        return int(self.cases["weights"][index].shape[0])

    def run(self, index: int, guard):
        from services.judge.cases import apply_layout
        from services.judge.run_cases import run_case

        width, layout = self._width(index), self.cases["layouts"][index]
        view = lambda t: apply_layout(t, layout, width)  # noqa: E731
        return run_case(self.call, self._module(width), self._state(index), self.cases["bases"][index], view, guard)

    def again(self, index: int, ghost: bool, when: str = PRODUCTION):
        """Case `index` as production calls it: weight and input in plain memory (the ghost: no launch), the input
        and the weight checked bit for bit after the call."""
        import torch

        from services.judge.cases import apply_layout
        from services.judge.run_cases import run_plain

        width = self._width(index)
        module = self._module(width)
        state = self._state(index)
        with torch.no_grad():
            for attr, value in state.items():
                getattr(module, attr).data = value.to(self.device)
            x = apply_layout(self.cases["bases"][index].to(self.device), self.cases["layouts"][index], width)
        call = self.ghost_call if ghost else self.call
        watched = [x, *(getattr(module, attr).data for attr in state)]
        return run_plain(lambda: call(module, (x,), {}), watched, when)

    def case_tensors(self, index: int) -> list:
        return [self.cases["bases"][index], *self._state(index).values()]

    def timed(self):
        """(the oracle module, the candidate bound to it, the timing shapes)."""
        from services.core import kernels

        width = int(self.job["width"])
        main = _oracle(self.cls, self.job, width, self.device, seed=int(self.job["seed_base"]))
        self.timed_state = [*main.parameters(), *main.buffers()]
        return main, kernels.bound_forward(main, self.wrapper, self.contract), _timing_shapes(self.job, width)

    def stress_input(self, dtype):
        import torch

        return torch.randn(1, int(self.job["width"])).to(device=self.device, dtype=dtype)


def _pair_oracle(variant: str):
    """torch's act(gate) * up as a module of one stacked (2, ..., width) input, for the timing's baselines (eager,
    torch.compile) and its replay check; it counts the bytes the fused op must move."""
    import torch

    from services.ops import gated_mlp

    fn = gated_mlp.reference(variant)

    class GatedReference(torch.nn.Module):
        reads_per_write = 2  # its floor is at a binary elementwise op's ceiling (services.judge.timing)

        def forward(self, gu):
            return fn(gu[0], gu[1])

        @staticmethod
        def bytes_moved(gu) -> int:
            return gated_mlp.bytes_moved(gu[0].numel(), gu.element_size())

    return GatedReference().eval()


class _PairSubject:
    """An op of two operands (a gated MLP's act(gate) * up): the family's op called on each case's operands; the
    layer around it (the projections) is the model's own code and not the candidate's."""

    OPERANDS = ("gates", "ups")  # the cases' operand lists, in the op's argument order

    def __init__(self, job: dict, ops, plan, loaded, empty, cases: dict, device):
        self.job, self.cases, self.device = job, cases, device
        self.op = ops.make_op(plan, loaded, empty=empty)
        self.ghost_op = ops.make_op(plan, loaded, empty=empty, launch=False)
        self.count = len(cases[self.OPERANDS[0]])

    def _view(self, index: int):
        """The case's layout as a function of a base (its operands' width read off the base: row-strided pads)."""
        from services.judge.cases import PAD, apply_layout

        layout = self.cases["layouts"][index]
        width = int(self.cases[self.OPERANDS[0]][index].shape[-1]) - (PAD if layout == "row-strided" else 0)
        return lambda t: apply_layout(t, layout, width)

    def _bases(self, index: int):
        return [self.cases[name][index] for name in self.OPERANDS]

    def run(self, index: int, guard):
        from services.judge.run_cases import run_op_case

        view = self._view(index)
        return run_op_case(self.op, self._bases(index), lambda placed: [view(t) for t in placed], guard)

    def again(self, index: int, ghost: bool, when: str = PRODUCTION):
        from services.judge.run_cases import run_plain

        view = self._view(index)
        operands = [view(base.to(self.device)) for base in self._bases(index)]
        op = self.ghost_op if ghost else self.op
        return run_plain(lambda: op(*operands), operands, when, inputs=len(operands))

    def case_tensors(self, index: int) -> list:
        return self._bases(index)

    def timed(self):
        shapes = [(2, *shape) for shape in _timing_shapes(self.job, int(self.job["width"]))]
        return _pair_oracle(self.job["variant"]), lambda gu: self.op(gu[0], gu[1]), shapes

    def stress_input(self, dtype):
        import torch

        return torch.randn(2, 1, int(self.job["width"])).to(device=self.device, dtype=dtype)


def _unary_oracle(variant: str):
    """torch's activation (HF's module, op by op) as a module, for the timing's baselines (eager, torch.compile)
    and its replay check; it counts the bytes the fused op must move."""
    import torch

    from services.ops import plain_mlp

    fn = plain_mlp.reference(variant)

    class ActivationReference(torch.nn.Module):
        def forward(self, x):
            return fn(x)

        @staticmethod
        def native_op(x):  # torch's own fused op for the same formula (GELU's tanh form: one kernel)
            if variant != "mlp_gelu_tanh":
                raise NotImplementedError(f"torch has no fused op for {variant}")
            return torch.nn.functional.gelu(x, approximate="tanh")

        @staticmethod
        def bytes_moved(x) -> int:
            return plain_mlp.bytes_moved(x.numel(), x.element_size())

    return ActivationReference().eval()


class _UnarySubject(_PairSubject):
    """An op of one operand (a plain MLP's activation): the family's op called on each case's operand; the maps
    around it are the model's own code and not the candidate's."""

    OPERANDS = ("operands",)

    def timed(self):
        return _unary_oracle(self.job["variant"]), self.op, _timing_shapes(self.job, int(self.job["width"]))

    def stress_input(self, dtype):
        import torch

        return torch.randn(1, int(self.job["width"])).to(device=self.device, dtype=dtype)


def _add_norm_oracle(variant: str, width: int, device, dtype, seed: int):
    """torch's add and the post norm as a module of one stacked (2, ..., width) input (the attention output, the
    residual), with a weight (and bias) drawn around the module's init: the timing's eager and torch.compile
    baselines and its replay check. Its native baseline is torch's add then its fused norm (torch has no fused
    add-and-norm); it counts the bytes the fused op must move."""
    import torch

    from services.ops import residual_norm, row_reduction

    fn = residual_norm.reference(variant)
    inner = residual_norm.norm_variant(variant)
    gen = torch.Generator().manual_seed(seed)
    weight = (1 + 0.1 * torch.randn(width, generator=gen)).to(device=device, dtype=dtype)
    biased = inner in row_reduction.BIASED
    bias = (0.1 * torch.randn(width, generator=gen)).to(device=device, dtype=dtype) if biased else None
    eps = 1e-6
    F = torch.nn.functional

    class AddNormReference(torch.nn.Module):
        def forward(self, ax):
            return fn(ax[0], ax[1], weight, eps, bias)

        @staticmethod
        def native_op(ax):
            s = ax[1] + ax[0]
            scale = row_reduction.scale_of(inner, weight)
            if inner.startswith("layernorm"):
                return F.layer_norm(s, (width,), scale, bias, eps), s
            return F.rms_norm(s, (width,), scale, eps), s

        @staticmethod
        def bytes_moved(ax) -> int:
            return residual_norm.bytes_moved(ax[0].numel() // width, width, ax.element_size(), weight.element_size())

    return AddNormReference().eval(), weight, bias, eps


class _AddNormSubject:
    """The residual norm's op (a decoder layer's attention add and post norm): the family's op called on each
    case's (attention output, residual) with its weight, bias and epsilon; its two outputs flattened into one
    tensor by our code (services.judge.add_norm_cases.flat). The layer around it is the model's own code."""

    def __init__(self, job: dict, ops, plan, loaded, empty, cases: dict, device):
        self.job, self.cases, self.device = job, cases, device
        self.op = ops.make_op(plan, loaded, empty=empty)
        self.ghost_op = ops.make_op(plan, loaded, empty=empty, launch=False)
        self.count = len(cases["actives"])

    def _bases(self, index: int):
        biases = self.cases["biases"]
        extra = [biases[index]] if biases else []
        return [self.cases["actives"][index], self.cases["residuals"][index], self.cases["weights"][index], *extra]

    def _view(self, index: int):
        from services.judge.cases import PAD, apply_layout

        layout = self.cases["layouts"][index]
        width = int(self.cases["weights"][index].shape[0])
        padded = width + (PAD if layout == "row-strided" else 0)
        return lambda placed: [apply_layout(t, layout, width) if t.shape[-1] == padded and t.dim() > 1 else t
                               for t in placed]  # fmt: skip

    def _call(self, op, index: int):
        from services.judge.add_norm_cases import flat

        eps = float(self.cases["epsilons"][index])
        return lambda a, x, w, b=None: flat(op(a, x, w, eps, b))

    def run(self, index: int, guard):
        from services.judge.run_cases import run_op_case

        return run_op_case(self._call(self.op, index), self._bases(index), self._view(index), guard)

    def again(self, index: int, ghost: bool, when: str = PRODUCTION):
        from services.judge.run_cases import run_plain

        operands = self._view(index)([t.to(self.device) for t in self._bases(index)])
        call = self._call(self.ghost_op if ghost else self.op, index)
        return run_plain(lambda: call(*operands), operands, when, inputs=2)  # the weight (and bias) after the pair

    def case_tensors(self, index: int) -> list:
        return self._bases(index)

    def timed(self):
        from services.judge.module_factory import torch_dtype

        width = int(self.job["width"])
        dtype = torch_dtype(self.job["input_dtype"])
        main, weight, bias, eps = _add_norm_oracle(self.job["variant"], width, self.device, dtype,
                                                   int(self.job["seed_base"]))  # fmt: skip
        shapes = [(2, *shape) for shape in _timing_shapes(self.job, width)]
        self.timed_state = [weight] if bias is None else [weight, bias]
        return main, lambda ax: self.op(ax[0], ax[1], weight, eps, bias), shapes

    def stress_input(self, dtype):
        import torch

        return torch.randn(2, 1, int(self.job["width"])).to(device=self.device, dtype=dtype)


def _rope_oracle(fn, heads_q: int, heads_k: int, rotary_dim: int = 0):
    """The live RoPE function as a module of one packed (batch, seq, heads_q + heads_k + 2, head_dim) input — q and
    k heads, then cos and sin — for the timing's baselines (eager, torch.compile) and its replay check: q and k
    unpacked as attention passes them (transposed views), cos and sin as strided views (no copy), the first
    `rotary_dim` of their slots where the rotary width is narrower than the head."""
    import torch

    from services.ops import rotary

    def unpack(x):
        q = x[:, :, :heads_q].transpose(1, 2)
        k = x[:, :, heads_q : heads_q + heads_k].transpose(1, 2)
        width = rotary_dim or x.shape[-1]
        return q, k, x[:, :, -2, :width], x[:, :, -1, :width]

    class RopeReference(torch.nn.Module):
        def forward(self, x):
            return fn(*unpack(x))

        @staticmethod
        def bytes_moved(x) -> int:
            b, s, _, d = x.shape
            cos = b * s * (rotary_dim or d)
            return rotary.bytes_moved(b * s * heads_q * d, b * s * heads_k * d, cos, x.element_size())

    return RopeReference().eval(), unpack


class _RopeSubject:
    """A rotary function: the family's op called on each case's (q, k, cos, sin), laid out as attention passes
    them; its two outputs flattened into one tensor by our code (services.judge.rope_cases.flat)."""

    def __init__(self, job: dict, module, ops, plan, loaded, empty, cases: dict, device, contract):
        from services.judge.rope_cases import flat, one_tensor_form

        self.job, self.cases, self.device = job, cases, device
        # a function of one tensor (Gemma 4's) is called for q alone (the cases' k has no heads), and so is the
        # op, as the server's binder calls it: without k
        self.one_tensor = ops.one_tensor(contract)
        live_fn = getattr(module, job["class_path"].rsplit(".", 1)[-1])  # the live function: the timing's oracle
        self.fn = one_tensor_form(live_fn, contract)
        op = one_tensor_form(ops.make_op(plan, loaded, empty=empty), contract, ours=True)
        ghost = one_tensor_form(ops.make_op(plan, loaded, empty=empty, launch=False), contract, ours=True)
        self.op = lambda *operands: flat(op(*operands))
        self.ghost_op = lambda *operands: flat(ghost(*operands))
        self.raw_op = op
        self.count = len(cases["sets"])

    def _view(self, index: int):
        from services.judge.rope_cases import operands

        heads, layout = tuple(self.cases["heads"][index]), self.cases["layouts"][index]
        dim = int(self.cases["dims"][index])  # q's head dim (cos's may be a narrower rotary width)
        return lambda placed: list(operands(placed, layout, heads, dim))

    def run(self, index: int, guard):
        from services.judge.run_cases import run_op_case

        return run_op_case(self.op, list(self.cases["sets"][index]), self._view(index), guard)

    def again(self, index: int, ghost: bool, when: str = PRODUCTION):
        from services.judge.run_cases import run_plain

        operands = self._view(index)([t.to(self.device) for t in self.cases["sets"][index]])
        op = self.ghost_op if ghost else self.op
        return run_plain(lambda: op(*operands), operands, when, inputs=len(operands))

    def case_tensors(self, index: int) -> list:
        return list(self.cases["sets"][index])

    def timed(self):
        live = tuple(int(d) for d in self.job["live_shape"])
        b, hq, s, d = live if len(live) == 4 else (1, 4, 1, int(self.job["width"]))
        from services.ops import rotary

        # k's live heads (a GQA model has fewer than q), k as (batch, heads, seq, head_dim) whichever order the call
        # passed; as many as q where the profile predates recording them
        second = rotary.heads_major(self.job.get("second_shape") or (), self.job.get("third_shape") or ())
        hk = 0 if self.one_tensor else second[1] if len(second) == 4 else hq

        main, unpack = _rope_oracle(self.fn, hq, hk, rotary.live_rotary_dim(self.job.get("third_shape") or (), d))
        by_positions: dict[int, tuple[int, ...]] = {}
        for shape in [(b, s), (1, 1), (1, 4096), (1, 32768)]:
            by_positions.setdefault(shape[0] * shape[1], (*shape, hq + hk + 2, d))
        return main, lambda x: self.raw_op(*unpack(x)), list(by_positions.values())

    def stress_input(self, dtype):
        import torch

        live = tuple(int(d) for d in self.job["live_shape"])
        hq, d = (live[1], live[3]) if len(live) == 4 else (4, int(self.job["width"]))
        heads = hq + 2 if self.one_tensor else 2 * hq + 2  # q's heads (and as many of k's), cos, sin
        return torch.randn(1, 1, heads, d).to(device=self.device, dtype=dtype)


def judge(job: dict, cls, report: WallReport, wall: AuditWall | None = None, clock=None):
    """(facts, TimingEvidence) for the job's candidate; the outputs go to `outputs.pt` in scratch.

    Every call of the candidate runs under `clock` (services.judge.run_cases.CallClock: a call past its limit ends
    the judging); without one, a clock whose expiry raises (CallExpired) in this process."""
    import torch

    from services.core import kernels
    from services.core.pb import events_pb2 as pb
    from services.judge import tamper
    from services.judge.module_factory import torch_dtype
    from services.judge.poison import NAN_BYTE, POISON
    from services.judge.run_cases import (
        CallClock,
        Guard,
        Runs,
        prefill_pairs,
        recording,
        stress,
        under_answers,
        under_fill,
        under_random_fill,
    )
    from services.ops import family, gated_mlp, plain_mlp, residual_norm, rotary

    contract, plan = pb.Contract(), pb.LaunchPlan()
    contract.ParseFromString(base64.b64decode(job["contract"]))
    plan.ParseFromString(base64.b64decode(job["plan"]))
    device = torch.device(job["device"])
    gpu = device.type == "cuda"
    dtype = torch_dtype(job["input_dtype"])
    facts: dict = {"loaded": False, "problems": []}
    cases = torch.load(Path.cwd() / "cases.pt", weights_only=True)  # the parent's cases: data only

    POISON.install()  # before the snapshot and the load: the wrapper's torch.empty is filled with NaN too
    namespaces = tamper.watched(cls, gpu=gpu)
    before = tamper.snapshot(namespaces)
    untimed = pb.TimingEvidence(measured=False, reason="the candidate did not load")
    allocate = {"fn": None}  # the output allocator of the call under way: guarded, or filled with a pattern

    def empty(shape, *, dtype, device):
        return (allocate["fn"] or torch.empty)(shape, dtype=dtype, device=device)

    try:
        names = sorted({launch.kernel for launch in plan.launches})
        loaded = kernels.load_kernels(kernels.write_source(Path.cwd() / "kernel", job["source"]), names)
        ops = family(plan.family)
        if ops is gated_mlp:
            subject = _PairSubject(job, ops, plan, loaded, empty, cases, device)
        elif ops is rotary:
            subject = _RopeSubject(job, cls, ops, plan, loaded, empty, cases, device, contract)
        elif ops is residual_norm:
            subject = _AddNormSubject(job, ops, plan, loaded, empty, cases, device)
        elif ops is plain_mlp:
            subject = _UnarySubject(job, ops, plan, loaded, empty, cases, device)
        else:
            subject = _NormSubject(job, cls, ops, plan, loaded, empty, contract, cases, device)
    except Exception as exc:
        facts["load_error"] = f"{type(exc).__name__}: {exc}"
        return facts, untimed
    facts["loaded"] = True

    def tampered(when: str, snapshot: dict | None = None) -> bool:
        names = tamper.changed(snapshot or before, namespaces)
        if names and not facts.get("tampered"):
            shown = ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
            facts["tampered"] = f"{when}, {shown} had been replaced"
        return bool(names)

    if tampered("on import"):
        return facts, pb.TimingEvidence(measured=False, reason="tampered: not timed")
    canary_seed = int(job["seed_base"]) * 7919 + 1  # the guard bytes of this judging, unknown to the kernel
    if clock is None:
        clock = CallClock(job["device"], expire=lambda fact: facts.update(call_timeout=fact))

    def timed_call(what: str, index: int):
        tensors = subject.case_tensors(index)
        return clock.call(what, tuple(tensors[0].shape), 2 * sum(t.nbytes for t in tensors))

    answers: dict[int, list] = {}  # case -> its outputs as the wrapper allocated them (CPU), for the pre-fills

    def run(index: int, fill=None, what: str = ""):
        """Case `index` in guarded memory; `fill` the answers its outputs' memory holds (another case's)."""
        guard = Guard(device, canary_seed)
        allocated: list = []
        allocate["fn"] = recording(under_answers(guard.empty, fill) if fill else guard.empty, allocated)
        try:
            with timed_call(what or f"case {index}", index):
                done = subject.run(index, guard)
        finally:
            allocate["fn"] = None
        if not done.problem and fill is None:
            answers[index] = [t.detach().cpu().clone() for t in allocated]
        return done

    runs = Runs()
    for index in range(subject.count):
        runs.outputs.append(run(index))
        if runs.outputs[-1].problem:  # stop at the first: a kernel that wrote out of bounds may have hurt us
            break
    facts["problems"] = runs.problems()
    saved = {"outputs": [r.output for r in runs.outputs]}
    tampered("during the cases")
    clean = not facts["problems"] and not facts.get("tampered")

    def again(index: int, ghost: bool):
        with timed_call("the ghost call" if ghost else f"case {index} as production calls it", index):
            done = subject.again(index, ghost)
        if done.problem:
            facts["problems"].append({"case": index, "rule": done.problem[0], "detail": done.problem[1]})
        return done.output

    if clean:
        # The first case again as production calls it: no guard bytes, no poison, the weight and input in
        # plain memory, the output's memory holding random bytes. A kernel that behaves only where it sees
        # the judge's canaries or fills answers differently here.
        allocate["fn"] = under_random_fill(canary_seed + 1)
        saved["second"] = again(0, ghost=False)
        # The launch skipped, into memory full of NaN (not the block the last answer was just freed from,
        # which the CUDA caching allocator would hand back): the answer must differ.
        allocate["fn"] = under_fill(NAN_BYTE)
        saved["ghost"] = again(0, ghost=True)
        allocate["fn"] = None
    if clean and not facts["problems"]:
        # Some cases again (drawn from the judging's seed), each output's memory holding another case's answer of the
        # same shape, as production's allocator hands back the block of the last call: the answer must be this
        # case's. A kernel that skips its work where the output already looks plausible returns the other's.
        signatures = [tuple((tuple(t.shape), str(t.dtype)) for t in answers[i]) for i in range(subject.count)]
        pairs = prefill_pairs(canary_seed + 2, signatures)
        saved["prefilled_cases"], saved["prefilled"] = [], []
        for case, donor in pairs:
            done = run(case, fill=answers[donor], what=f"case {case} pre-filled with case {donor}'s answer")
            if done.problem:
                detail = f"its output pre-filled with case {donor}'s answer: {done.problem[1]}"
                facts["problems"].append({"case": case, "rule": done.problem[0], "detail": detail})
                break
            saved["prefilled_cases"].append([case, donor])
            saved["prefilled"].append(done.output)
    clean = clean and not facts["problems"]
    torch.save(saved, Path.cwd() / OUTPUTS_FILE)
    (Path.cwd() / FIRST_PASS_FILE).write_text(json.dumps(facts))
    timing = pb.TimingEvidence(measured=False, reason="incorrect: not timed")
    if not clean or not _go_ahead(int(job.get("ready_fd", -1))):
        return facts, timing  # the parent saw the first pass fail (or it failed here): no timing for it
    main, candidate, shapes = subject.timed()
    state = list(getattr(subject, "timed_state", []))
    facts["call_problems"] = []  # calls that are no case (the stress or timing calls): problems as facts too
    if gpu:
        timing = _time(main, candidate, job, shapes, dtype, wall, tampered, namespaces, facts, state)
    else:
        timing = pb.TimingEvidence(measured=False, reason="no GPU: correctness only under TRITON_INTERPRET=1")
        calls, problem = stress(candidate, subject.stress_input(dtype), CPU_STRESS_CALLS, state, clock)
        facts["stress_calls"] = calls
        if problem:
            facts["call_problems"].append(problem)
        tampered("during the further calls")
    # Run again after the timing calls: a kernel that is only right the first few times is wrong.
    after = Runs([run(i) for i in range(min(AFTER_CASES, subject.count))])
    saved["after"] = [r.output for r in after.outputs]
    facts["after_problems"] = after.problems()
    facts["slowest_call"] = clock.slowest
    torch.save(saved, Path.cwd() / OUTPUTS_FILE)
    return facts, timing


def _go_ahead(ready_fd: int) -> bool:
    """Tell the parent the first pass is on disk and wait for its word: time it, or stop (it was wrong)."""
    if ready_fd < 0:
        return True
    os.write(ready_fd, b"1")
    os.close(ready_fd)
    return sys.stdin.readline().strip() == "time"


def _raise_walls(job: dict, scratch: Path, report: WallReport) -> None:
    walls = job["walls"]
    if walls.get("netns", True):
        enter_network_namespace(report)
    else:
        report.network = "audit-hook"
        report.walls.append("network namespace switched off: sockets refused by the audit hook")
    uid = drop_root(scratch, report, gpu=job["device"] == "cuda") if walls.get("drop_root", True) else None
    if uid is None and not report.user:
        report.user = "same user (root drop switched off)" if os.getuid() == 0 else "same user (not root)"
    set_limits(
        report,
        cpu_s=int(walls["cpu_s"]),
        file_bytes=int(walls["file_bytes"]),
        address_bytes=walls.get("address_bytes"),
        processes=processes_allowed(int(walls["processes"]), uid),
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m services.judge.sandbox_child < job.json (started by the judge)", file=sys.stderr)
        return 2
    job = json.loads(sys.stdin.readline())  # one line; stdin stays open for the parent's go-ahead
    nonce = job.pop("nonce")
    result_fd = int(job.pop("result_fd"))
    scratch = Path.cwd()
    report = WallReport()
    from services.core.pb import events_pb2 as pb

    walls_failed = ""

    def answer(facts: dict, timing) -> None:
        _answer(result_fd, nonce, facts, timing, report, walls_failed)

    def expire(fact: dict) -> None:  # a call ran past its limit (the clock's thread): answer and end, at once
        answer({"loaded": True, "problems": [], "call_timeout": fact},
               pb.TimingEvidence(measured=False, reason="a call ran past its per-call limit"))  # fmt: skip
        os._exit(0)

    try:
        try:
            _raise_walls(job, scratch, report)
        except Exception as exc:  # fail closed: no candidate runs behind walls that did not go up
            walls_failed = f"{type(exc).__name__}: {exc}"
            raise RuntimeError(f"the sandbox could not raise its walls: {walls_failed}") from exc
        cls = _prepare(job)
        from services.judge.run_cases import CallClock

        clock = CallClock(job["device"], expire)
        wall = None
        if job["walls"].get("audit", True):
            wall = install_audit_wall(scratch, [scratch / JUDGE_CACHE], job["device"] == "cuda", report)
        facts, timing = judge(job, cls, report, wall, clock)
    except BaseException as exc:  # whatever went wrong (even SystemExit) is a fact for the parent
        facts = {"loaded": False, "child_error": f"{type(exc).__name__}: {exc}"[:2000]}
        timing = pb.TimingEvidence(measured=False, reason="the sandbox child failed")
    answer(facts, timing)
    return 0


def _answer(result_fd: int, nonce: str, facts: dict, timing, report: WallReport, walls_failed: str) -> None:
    """The answer, written once to the inherited descriptor of an unlinked file (services.judge.sandbox reads it)."""
    from google.protobuf import json_format

    result = {
        "nonce": nonce,
        "facts": facts,
        "timing": json_format.MessageToDict(timing, preserving_proto_field_name=True),
        "walls": {
            "network": report.network,
            "user": report.user,
            "walls": report.walls,
            "refused": report.refused,
            "failed": walls_failed,
        },
    }
    data = json.dumps(result).encode()
    os.lseek(result_fd, 0, os.SEEK_SET)
    while data:
        data = data[os.write(result_fd, data) :]
    os.close(result_fd)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
