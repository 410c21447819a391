"""What an op family offers the services, typed: the judge's side of the seam.

Every family is a package `services/ops/<family>/`: its `__init__` is the op (recognition, the plan vocabulary, the
wrapper, the bytes a call moves), imported by every service; its `judging` module is what the judge needs to judge a
candidate of it (the operands it draws from the input domain the server can send, their references, and how the
sandbox child calls the candidate), imported only by the judge, through `services.ops.judging(name)`. The judge
itself names no family: it asks the family for a `CaseSet`, ships the family's typed operands to the child, and the
child asks the same family for its `Subject`.

Nothing here imports the judge: the types that cross the seam live on this floor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from services.core.pb import events_pb2 as pb


@dataclass(frozen=True)
class LiveTarget:
    """What the profiler saw of the target class: its introspection, its live input shape and dtype."""

    introspection: pb.ModuleIntrospection
    input_shape: tuple[int, ...]
    dtype: str
    computes: str = ""  # what the server saw its forward compute (services.ops), "" when unknown
    second_shape: tuple[int, ...] = ()  # a function's second operand on the dominant calls (RoPE's k)
    third_shape: tuple[int, ...] = ()  # its third (RoPE's cos: the last dim is the rotary width)
    widths: tuple[int, ...] = ()  # every last dim the class was called at (one class can serve two)
    # The served model's input domain (pb.ProfileObservation; 0: unknown): the most token rows one forward
    # carries, the longest sequence, the most sequences stepped together.
    max_rows: int = 0
    max_positions: int = 0
    max_batch: int = 0
    # The served model's own values of what the op computes with (pb.LiveParameters, each distinct set once; as many
    # as the profile's budget held) and how many distinct sets it has in all (services.judge.live_values).
    live: tuple = ()
    live_sets: int = 0


@dataclass(frozen=True)
class JudgeAsk:
    """A judging the judge asks a family to prepare: the proposal, its live target, and the judge's settings."""

    proposal: pb.CandidateProposed
    target: LiveTarget
    gpu: bool
    examples: int  # hypothesis draws beyond the fixed cases
    seed_base: int  # fresh per judging: the cases, and the child's oracle weights, follow it
    cpu_max_rows: int  # the live shape's rows are capped at this on CPU (the interpreter is slow)

    @property
    def dtype(self) -> str:
        return self.target.dtype or "float32"


class DrawnCase(Protocol):
    """One case a family drew, as the judge reads it (services.judge.verdict): its name in a failure's words, the
    shape and value regime its evidence lists."""

    name: str
    shape: tuple[int, ...]
    regime: str


@dataclass(frozen=True)
class CaseSet:
    """What a family prepared for one judging: the cases and their references (kept by the judge), the operands the
    child runs them on (one typed record, `operands`, of the family's own `Operands` class), and the job's facts."""

    cases: Sequence[DrawnCase]
    refs: list
    operands: Any  # the family's Operands dataclass: it alone crosses to the child
    width: int
    live_shape: tuple[int, ...]
    input_dtype: str
    param_dtype: str
    itemsizes: tuple[int, int, int]  # input, weight, output
    eps: float | None = None
    eps_attr: str | None = None


def operands_to_data(operands) -> dict:
    """A family's Operands record as the plain data `torch.save(weights_only=True)` writes (tensors, lists, str)."""
    return {f.name: getattr(operands, f.name) for f in dataclasses.fields(operands)}


def operands_from_data(cls: type, data: dict):
    """The family's Operands record again, in the child: every field present, none unknown (a mismatch raises)."""
    names = {f.name for f in dataclasses.fields(cls)}
    if set(data) != names:
        raise ValueError(f"the cases hold {sorted(data)}, a {cls.__name__} holds {sorted(names)}")
    return cls(**data)


@dataclass(frozen=True)
class ChildContext:
    """What the sandbox child hands a family to build its Subject: the job, the live class (or a function target's
    module), the plan and its loaded kernels, the output allocator, the parent's operands, the device and the
    contract."""

    job: dict
    target: Any
    plan: pb.LaunchPlan
    loaded: dict
    empty: Callable
    operands: Any
    device: torch.device
    contract: pb.Contract


class Subject(Protocol):
    """The candidate as the child runs it, case by case: `count` cases, each run in guarded memory, again as
    production calls it (and as a ghost, its launch skipped), then the oracle, the candidate and the shapes it is
    timed at (GPU), or one input it is stressed with (CPU). `timed_state`: what the candidate reads besides its
    input, checked bit for bit after the timing calls (set by `timed`)."""

    count: int

    def run(self, index: int, guard): ...

    def again(self, index: int, ghost: bool, when: str = ...): ...

    def case_tensors(self, index: int) -> list: ...

    def timed(self) -> tuple[torch.nn.Module, Callable, list[tuple[int, ...]]]: ...

    def stress_input(self, dtype: torch.dtype) -> torch.Tensor: ...


class FamilyJudging(Protocol):
    """A family's `judging` module."""

    CPU_BOUNDARY: int  # dispatch limits the interpreter still draws both sides of (a plan above is refused on CPU)
    Operands: type  # the typed record of the cases' operands, parent to child

    def prepare(self, ask: JudgeAsk) -> CaseSet: ...

    def subject(self, ctx: ChildContext) -> Subject: ...


# ------------------------------------------------------------------ the coder's side


class FamilyTemplate(Protocol):
    """A family's `template` module: what the coder needs to write candidates of it, imported only through
    `services.ops.template(name)`. A template may also dispatch by size: then it has `DISPATCH_ROWS` and
    `combine(small, large, limit)`, and may measure a timed shape its own way (`dispatch_size(shape)`, rows by
    default) and say which of its configs a dispatch may combine (`plain(config)`, those without params by
    default)."""

    TEMPLATE: str  # the name its configs carry (TemplateConfig.template)
    OP_FAMILY: str  # the family it writes for (LaunchPlan.family)
    VARIANTS: tuple[str, ...]  # the variants it writes

    def contract_for(self, intro: pb.ModuleIntrospection, profile: pb.ModuleClassProfile) -> pb.Contract:
        """How a candidate plugs into the live target; raises services.ops.ContractRefused saying why it cannot
        (the coder imports no torch: the exception lives in the registry, not on this floor)."""
        ...

    def variant_for(self, computes: str) -> str | None: ...

    def search_configs(
        self, variant: str = ..., width: int = ..., live_shape: tuple[int, ...] = ...
    ) -> list[pb.TemplateConfig]: ...

    def valid(self, config: pb.TemplateConfig) -> bool: ...

    def render(self, config: pb.TemplateConfig) -> str: ...

    def plan(self, config: pb.TemplateConfig) -> pb.LaunchPlan: ...


@dataclass(frozen=True)
class LayerCost:
    """What one mean call of the op a layer rewrite fuses computes and moves, seen inside its layer: its roofline
    class, FLOPs and bytes, the width it runs over and the rows of the typical call."""

    roofline: str
    flops: float
    bytes: float
    width: int
    rows: int


class FamilyPhysics(Protocol):
    """A family's `physics` module: the roofline class of its op, and for a layer family the op's cost inside its
    layer and the children its rewrite keeps (their time is not the op's)."""

    ROOFLINE: str

    def timed_rows(self, dims: tuple[int, ...]) -> int: ...  # the rows of a call of the judge's timed shape

    # a layer family's, besides:
    # KEPT: str  -- the kept children, as the ranking's note says them
    # def kept_roles(roles) -> tuple[str, ...]  -- the roles whose time the rewrite keeps
    # def shape_roles(roles) -> tuple[str, ...]  -- the roles whose weight shapes the cost reads
    # def layer_cost(profile, shapes, elem) -> LayerCost | None
