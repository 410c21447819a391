"""Where a kernel's values come from and where they go: a dataflow check of candidate kernel bodies.

The kernel schema (services.core.kernel_schema) says which constructs a kernel may use; this says how values may
flow between them, for one launch of a plan (which fixes what each runtime parameter is: an input tensor, an
output, a shape, a stride, a scalar). A kernel that is wrong only on some inputs has to decide *somewhere* that an
input is one of those: by branching on what it loaded, masking with it, addressing with it, looping on it, or by
reading what it wrote last time. Tests can only sample inputs; this closes those doors for every input:

- values loaded from memory (and runtime scalars such as eps) flow into arithmetic and stores, never into a
  branch, a loop bound, a mask, an address or a `tl.where` condition (`value-branch`, `value-address`);
- an address is a tensor argument of the plan plus an offset built from program ids, ranges, loop variables,
  shape arguments, strides and constexprs; a pointer is never compared, multiplied, cast or turned into an int
  (under the interpreter `int()` of a pointer is a raw address of the process) (`pointer-origin`);
- loads read inputs only and stores write outputs only, unless the family declares a tensor in-place
  (`reads-output`: an output buffer read as a cache; `writes-input`: a residual stream or a weight changed);
- every loop is a `for` over `range`/`tl.range`/`tl.static_range` of shape arguments with a positive step that
  cannot be zero (a literal, a constexpr, the program count): it ends on every input (`unbounded-loop`);
- what grows with the call (program ids, shape arguments, loops over them) is compared with shapes, never with a
  number fixed for the launch (`pid < 32768`, `n_rows > 4096`, `tl.minimum(n_rows, 32768)`): the plan's dispatch
  is the one place a size boundary may live, where the judge draws both of its sides (`hidden-boundary`);
- a stored value depends on which row it is, or how many rows the call has, only through what it loads: program
  ids, the program count, the family's count and stride arguments and loops over them address and mask, never
  enter the arithmetic of an answer, nor pick one through a `tl.where`, a conditional or an `if` once divided,
  reduced or passed through a function (`1 + 0.01 * (n_rows // 777 - n_rows // 778)` is right at every count but
  777, which the judge may never draw) (`count-value`). Widths (`shape` arguments: a norm divides by its width) may;
- which row a program takes (program ids, loop variables, what is built from them) is compared only as a bound: by
  `<`, `<=`, `>`, `>=`, against a side that holds no row, the row's side a sum of rows scaled by what is not a row,
  one condition bounding it from one side (`row < n_rows`, `pid < units`). Equality (`row != 77777`), a row against a
  row (`row * row < 32768 * row + 1`), a row made curved (a product of rows, a remainder, quotient or power of one by
  a fixed number, a function of one) and two bounds from both sides (`(3 * row < n_rows) | (3 * row > n_rows)`)
  single out rows a sample of programs may never run (`row-pick`), as does a row that can wrap in 32 bits (a factor
  over 1,024 or two factors before a cast to 64 bits, a row carried round a loop); a side moved by a fixed number
  (`row - 32768 < 0`), a condition on how many rows or programs alone, a loop of a fixed number of trips stepping by
  a count and a loop ending at a multiple of the program count are hidden boundaries;
- a loaded value is never reinterpreted as an integer (`value-bits`), and a comparison of loaded values other than a
  sign split is a branch however its result is used (`value-branch`).

Abstract interpretation over the AST: each name holds a taint (loaded data or not; which tensor arguments it may
point into), joined over branches and iterated to a fixed point over loops; a call of another kernel of the source
is followed with its arguments' taints. Pure and stdlib-only: the judge and the server both run it.

Over 400 lines, one file: one walk of a kernel's AST that tracks where each value comes from; every rule reads the
same facts of that walk.
"""

from __future__ import annotations

import ast
import math
import operator
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

from services.core.kernel_schema import constant_name, dotted
from services.core.pb import events_pb2 as pb

RULES: dict[str, str] = {
    "value-branch": "loaded values never decide a branch, a loop, a mask or a tl.where condition",
    "value-address": "loaded values never become part of an address",
    "value-bits": "loaded values are never converted or reinterpreted as integers (a cast, a bitcast): their bits "
    "and steps pick bands no regime draws",
    "pointer-origin": "an address is a tensor argument plus an index offset; pointers are never compared, cast or "
    "turned into numbers",
    "reads-output": "a kernel loads only its inputs (an output is not a cache), unless the family declares it in-place",
    "writes-input": "a kernel stores only to its outputs, never to an input or a weight",
    "kernel-value": "a source kernel is only called, or passed by its bare name as a tl.reduce or "
    "tl.associative_scan combine function",
    "unbounded-loop": "every loop is a for over range/tl.range/tl.static_range of shape arguments with a positive "
    "constant, constexpr or program-count step",
    "hidden-boundary": "program ids, shapes and loops over them are compared with shapes, never with fixed numbers "
    "(a dispatch boundary is the plan's to declare)",
    "count-value": "a stored value depends on which row or how many rows only through what it loads (program ids, "
    "counts and strides address and mask)",
    "row-pick": "which row a program takes is compared only as a bound (<, <=, >, >= against no row, from one side): "
    "never by equality, against another row, made curved, or bounded from both sides",
    "count-window": "a window of row counts (a count divided, reduced or passed through a function, other than a tile "
    "count such as cdiv(rows, R)) never moves an address, picks a mask's lanes or decides whether a load or store "
    "is issued",
}

# What a plan's runtime argument is, as its op family declares it (`ARG_ROLES` in each family). A count (rows,
# positions, heads, elements) says how much work the call has; a shape (a width) says what each piece of it is.
INPUT, OUTPUT, INPLACE, SHAPE, COUNT = "input", "output", "inplace", "shape", "count"
STRIDE, SCALAR = "stride", "scalar"
ROLES = (INPUT, OUTPUT, INPLACE, SHAPE, COUNT, STRIDE, SCALAR)

_LOOPS = ("range", "tl.range", "tl.static_range")
# Calls that only reshape or annotate: a pointer block passes through them as a pointer block.
_POINTER_SHAPING = frozenset(
    "tl.reshape tl.view tl.broadcast_to tl.broadcast tl.expand_dims tl.trans tl.permute tl.multiple_of "
    "tl.max_contiguous tl.max_constancy reshape view broadcast_to expand_dims trans permute ravel".split()
)
# A size the call grows with, taken at most (or at least) a fixed number, is a boundary as a comparison is.
_CAPS = frozenset({"tl.minimum", "tl.maximum", "tl.clamp", "min", "max"})
# Attributes that are types or static shapes, whatever they are read from.
_STATIC_ATTRS = frozenset({"dtype", "element_ty", "shape"})
# A row (a program id, below 2**21 at any count a server sends) times a factor up to this stays within 32 bits
_SAFE_FACTOR = 1024
_WIDE_TYPES = frozenset({"tl.int64", "tl.uint64"})
_INT_TYPES = frozenset(f"tl.{sign}int{bits}" for sign in ("", "u") for bits in (8, 16, 32, 64)) | {"tl.int1"}
_MAX_DEPTH = 8  # kernels calling kernels: Triton inlines them, none recurses
_MAX_LOOP_PASSES = 8


@dataclass(frozen=True)
class Taint:
    data: bool = False  # derived from loaded memory or a runtime scalar
    points: frozenset[str] = frozenset()  # the plan arguments (tensors) this may address
    # data whose zero crossings may have moved from the loaded values' (a constant added, a function applied):
    # its sign no longer tells the loaded values' signs, so a sign test of it is a threshold (see `_sign_test`)
    shifted: bool = False
    # grows with the call's size: program ids, runtime shapes and strides, loops over them
    grid: bool = False
    lane: bool = False  # a position inside a block (tl.arange): bounded by a constexpr, not fixed
    # which row, or how many (program ids, counts, strides, loops over them): an answer may not depend on it
    count: bool = False
    stepped: bool = False  # count passed through a division, a remainder, a bit operation or a function: a window
    # How many rows (a family's count arguments, the program count, sums and products of them) as opposed to which
    # one (`index`: program ids, loop variables, and anything offset from them). A size divided, reduced or passed
    # through a function is a `window` (it changes at some sizes only: `rows // 777 - rows // 778`) unless it is a
    # tile count (`tl.cdiv(rows, R)`); an index divided by a size is where in a tile it is, no window.
    size: bool = False
    index: bool = False
    window: bool = False
    # Which row, as its sign says: a row entering a sum positively (`pid * R + r`) rises with it, one subtracted
    # (`n_rows - pid`) falls; one made curved (a product of rows, a remainder, quotient or power of one by a fixed
    # number, a function of one) is neither, and is no bound. `nudged`: moved by a fixed number (`row - 32768`).
    rising: bool = False
    falling: bool = False
    curved: bool = False
    nudged: bool = False
    # a condition on which row: true for rows below a bound (`row < n_rows`), above one (`pid >= units`), or both
    below: bool = False
    above: bool = False
    # a row scaled (by anything), widened to 64 bits (`.to(tl.int64)`), or scaled past what 32 bits hold at the
    # rows a server sends (a factor over _SAFE_FACTOR, or scaled twice, before a widening): it may wrap
    scaled: bool = False
    wide: bool = False
    overflow: bool = False
    trips: bool = False  # a loop variable of a fixed number of trips (`tl.static_range(TRIPS)`)
    programs: bool = False  # built on the program count (`tl.num_programs`)
    neg: bool = False  # a size that may be negative (subtracted from something, negated): a row times it is no bound
    bent: bool = False  # a lane not as tl.arange gives it (divided, combined with a lane, times 0, moved by a number)
    tiled: bool = False  # a tile count (`tl.cdiv(rows, R)`): two of them combined are a window (`cdiv(n, 777) - ...`)

    def __or__(self, other: Taint) -> Taint:
        """What a value built from both may be: every flag of either (and the tensors either may point into)."""
        return Taint(
            *(
                getattr(self, f.name) | getattr(other, f.name)  # bools or; frozensets union
                for f in fields(Taint)
            )
        )

    def moved(self) -> Taint:
        return replace(self, shifted=self.data)

    def stepped_if_count(self) -> Taint:
        return replace(self, stepped=self.count)

    def negated(self) -> Taint:
        """Times -1: a rising row falls, and a size may be negative (`0 - 3 * n_cols`, `-n_rows`)."""
        return replace(self, rising=self.falling, falling=self.rising, neg=self.neg or (self.grid and not self.index))

    def bounds(self) -> Taint:
        """Its sides of which row alone (a condition's, or what one picked or set): nothing else of it."""
        return Taint(below=self.below, above=self.above)

    def inverted(self) -> Taint:
        """A condition's opposite: one that held below a bound holds above it."""
        return replace(self, below=self.above, above=self.below)

    def curve_if_row(self) -> Taint:
        return replace(self, curved=self.curved or self.index)

    @property
    def static(self) -> bool:
        """One number fixed for a launch whatever the input: literals, the source's constants, constexprs."""
        return not (self.data or self.points or self.grid or self.lane)

    @property
    def pointer(self) -> bool:
        return bool(self.points)


INDEX = Taint()
DATA = Taint(data=True)
GRID = Taint(grid=True)
COUNTED = Taint(grid=True, count=True)  # strides
SIZED = Taint(grid=True, count=True, size=True)  # a family's count arguments, the program count
INDEXED = Taint(grid=True, count=True, index=True, rising=True)  # program ids
WINDOWED = Taint(count=True, stepped=True)  # what an `if`, a loop or a pick on a window of counts decides


_RANGE_SLOTS = ("arg1", "arg2", "step")  # range's, tl.range's and tl.static_range's bounds, by position or by name


def _range_args(it: ast.Call) -> list[ast.expr]:
    """A range's (start, end[, step]) or (end,), its keywords put in place: `tl.range(0, n, step=s)` is `range(0, n,
    s)`; an end with no start starts at 0. Empty where it has no end."""
    slots: list[ast.expr | None] = [*it.args[:3], *[None] * (3 - len(it.args[:3]))]
    for k in it.keywords:
        if k.arg in _RANGE_SLOTS:
            slots[_RANGE_SLOTS.index(k.arg)] = k.value
    first, second, step = slots
    if first is None:
        return []
    bounds = [first] if second is None else [first, second]
    if step is not None:
        bounds = [ast.Constant(0), first, step] if second is None else [first, second, step]
    return bounds


# calls whose arguments the walk reads itself, by position and keyword name: every other argument is walked as an
# expression (a helper called in `volatile=` or as `tl.program_id`'s axis runs, and may store)
_READ_APART = {
    "tl.load": ("pointer", "mask", "other"),
    "tl.store": ("pointer", "value", "mask"),
    "tl.program_id": (),
    "tl.num_programs": (),
    "tl.arange": (),
}
_COMBINERS = frozenset({"tl.reduce", "tl.associative_scan"})  # calls that take a source kernel as a value


def _monomial(node: ast.expr) -> tuple[str | None, int, int] | None:
    """(name, sign, degree) of a product of numbers and names (`-0.044715 * x * x * x`: ("x", -1, 3)); None for
    anything else or a product of two names."""
    if isinstance(node, ast.Name):
        return node.id, 1, 1
    if isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value != 0:
        return None, 1 if node.value > 0 else -1, 0
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _monomial(node.operand)
        flip = -1 if isinstance(node.op, ast.USub) else 1
        return None if inner is None else (inner[0], inner[1] * flip, inner[2])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _to_wide_float(node):
        return _monomial(node.func.value)  # x.to(tl.float32): the same value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        a, b = _monomial(node.left), _monomial(node.right)
        if a is None or b is None or (a[0] and b[0] and a[0] != b[0]):
            return None
        return a[0] or b[0], a[1] * b[1], a[2] + b[2]
    return None


def _one_signed_odd(node: ast.AST) -> bool:
    """Whether a sum is of odd powers of one name, every term of one sign: its sign is that name's (a sign split
    of it stays one); `x*x - 7*x`, `x - w`, `x - eps * 2e6` are not."""

    def terms(n: ast.AST, sign: int) -> list | None:
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add | ast.Sub):
            left, right = terms(n.left, sign), terms(n.right, sign if isinstance(n.op, ast.Add) else -sign)
            return None if left is None or right is None else left + right
        mono = _monomial(n)
        return None if mono is None else [(mono[0], mono[1] * sign, mono[2])]

    found = terms(node, 1)
    return (
        bool(found)
        and len({(name, sign) for name, sign, _ in found}) == 1
        and all(name is not None and degree % 2 for name, _, degree in found)
    )


_WIDE_FLOATS = frozenset({"tl.float32", "tl.float64"})


def _to_wide_float(node: ast.Call) -> bool:
    """Whether a call is `x.to(tl.float32)` or `x.cast(tl.float64)` (by position or `dtype=`): no value changes."""
    if not (isinstance(node.func, ast.Attribute) and node.func.attr in ("to", "cast")):
        return False
    target = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "dtype"), None)
    return target is not None and _dotted(target) in _WIDE_FLOATS


def _join(taints) -> Taint:
    out = INDEX
    for t in taints:
        out = out | t
    return out


def _dotted(node: ast.AST) -> str:
    """'a.b.c' for a.b.c, "" when the chain does not start at a plain name (the kernel schema's reading)."""
    return dotted(node) or ""


@dataclass
class _Context:
    kernels: Mapping[str, ast.FunctionDef]
    readable: frozenset[str]
    writable: frozenset[str]
    positive: frozenset[str]  # constexpr parameters of the launched kernel whose value is known positive
    findings: dict[tuple[str, int], str] = field(default_factory=dict)
    # per tensor argument, the sides of which row its loads or stores are bounded from, and the first of each:
    # stores to one output below a bound and others above one leave the rows between unwritten (`check_launch`)
    sides: dict[str, dict[str, ast.AST]] = field(default_factory=dict)
    returns: list[Taint] = field(default_factory=list)

    def add(self, rule: str, reason: str, node: ast.AST) -> None:
        self.findings.setdefault((rule, getattr(node, "lineno", 0)), reason)


class _Kernel:
    """One kernel body under one binding of its parameters' taints."""

    def __init__(
        self,
        ctx: _Context,
        fn: ast.FunctionDef,
        env: dict[str, Taint],
        depth: int,
        positive: frozenset,
        values: Mapping[str, float] | None = None,
    ):
        self.ctx, self.fn, self.env, self.depth = ctx, fn, env, depth
        # names known to hold a positive step (constexprs given positive values, the program count) and set nowhere
        # else in the body: `ROWS = n_rows * 0` makes a positive constexpr a step of 0, a loop that never ends
        self.stores = Counter(n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
        self.positive = frozenset(p for p in positive if not self.stores[p])
        # names known to hold one number: the source's constants, constexprs the plan gives a number, and locals
        # set to a literal (a row's factor: its sign and size)
        self.values: dict[str, float] = dict(values or {})
        self.params = frozenset(a.arg for a in fn.args.args)  # set again in the body: no longer as passed
        self.constexprs = _constexpr_params(fn)
        self.returns: list[Taint] = []
        # each `return a, b`'s parts (None for a return of one value): a caller unpacking a helper's tuple gives each
        # name its own part's taint, not the whole tuple's (a helper's x and y pointers: x's points at x alone)
        self.tuples: list[tuple[Taint, ...] | None] = []
        self.parts: dict[int, tuple[Taint, ...]] = {}  # a call of a helper (by node) -> the parts of its tuple
        self.combiners: set[int] = set()  # names of source kernels passed bare as combine functions (by node)
        # what the statements being walked run under: an `if` on a window of counts makes everything it stores or
        # assigns depend on that window (`window_test`)
        self.control = INDEX
        # which rows the statements being walked run for: `if row < n_rows` holds below a bound, its `else` above
        # one; a store under bounds from both sides (an `if` inside an `if`, an `if` and a mask) can single out rows
        self.rows = INDEX
        # the bounds of which row a call of this kernel (a helper) sits under in its callers: joined with its own
        # around each load and store (`mask`), as one kernel's nested `if`s are
        self.called_under = INDEX
        # for each `if` the statements being walked sit under that holds the row above a bound, that bound's side
        # (`ast.dump`; None when the condition is no plain `row >= side`): a call passing `row - side` under it
        # starts its rows at 0 (`rebased`)
        self.floors: tuple[str | None, ...] = ()
        self.defs: dict[str, ast.expr | None] = {}  # each name's last plain assignment: a tile count by name

    # ------------------------------------------------------------------ statements

    def run(self) -> Taint:
        self.block(self.fn.body)
        return _join(self.returns)

    def returned_parts(self) -> tuple[Taint, ...] | None:
        """Each part of the tuple every return gives (of one length), joined over the returns; else None."""
        if not self.tuples or any(t is None or len(t) != len(self.tuples[0]) for t in self.tuples):
            return None
        return tuple(_join(parts) for parts in zip(*self.tuples, strict=True))

    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.stmt(stmt)

    def stmt(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign):
            value = self.expr(s.value)
            for target in s.targets:
                self.assign(target, s.value, value)
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self.assign(s.target, s.value, self.expr(s.value))
        elif isinstance(s, ast.AugAssign):
            self.assign(s.target, None, self.binop(s.op, self.expr(s.target), self.expr(s.value), s))
        elif isinstance(s, ast.Expr):
            self.expr(s.value)
        elif isinstance(s, ast.Return):
            self.returns.append((self.expr(s.value) if s.value is not None else INDEX) | self.row_bounds())
            elts = s.value.elts if isinstance(s.value, ast.Tuple) else None
            self.tuples.append(None if elts is None else tuple(self.expr(e) | self.row_bounds() for e in elts))
        elif isinstance(s, ast.If) and (fixed := self.fixed_test(s.test)) is not None:
            self.block(s.body if fixed else s.orelse)  # on constexprs the plan gives: compiled one way only
        elif isinstance(s, ast.If):
            tested = self.test(s.test, "an if")
            outer, outer_rows = self.control, self.rows
            bound = tested.bounds()
            if self.window_test(s.test):
                self.control = outer | WINDOWED
            before, outer_floors, known = dict(self.env), self.floors, dict(self.values)
            floor, floor_in_body = self.floor_of(s.test) if bound.above or bound.below else (None, False)
            self.rows = outer_rows | bound
            self.floors = outer_floors + ((floor if floor_in_body else None,) if bound.above else ())
            self.block(s.body)
            taken, taken_values = self.env, self.values
            self.env, self.values = dict(before), known
            self.rows = outer_rows | bound.inverted()
            self.floors = outer_floors + ((None if floor_in_body else floor,) if bound.below else ())
            self.block(s.orelse)
            self.env = _merge(taken, self.env)
            self.values = {k: v for k, v in self.values.items() if taken_values.get(k) == v}  # one number either way
            self.control, self.rows, self.floors = outer, outer_rows, outer_floors
        elif isinstance(s, ast.For):
            self.for_loop(s)
        elif isinstance(s, ast.While):
            self.ctx.add(
                "unbounded-loop",
                "a while loop: nothing proves it ends on every input (use a for over range of shape arguments)",
                s,
            )
            self.test(s.test, "a while")
            self.loop_body(s.body + s.orelse)
        # pass, break, continue: no flow of values

    def assign(self, target: ast.expr, value_node: ast.expr | None, value: Taint) -> None:
        # set under `if`s on which row, it holds for those rows only after them: picked as a `tl.where` picks
        value = value | self.control | self.row_bounds()
        if isinstance(target, ast.Name):
            self.env[target.id] = value
            if target.id in self.params:
                self.params = self.params - {target.id}
            once = self.stores[target.id] == 1 and value_node is not None and self.positive_step(value_node)
            self.positive = self.positive | {target.id} if once else self.positive - {target.id}
            # the number of a name set once (set again, in a loop or on one side of an if, it is no one number)
            number = _number(value_node) if value_node is not None and self.stores[target.id] == 1 else None
            if number is None:
                self.values.pop(target.id, None)
            else:
                self.values[target.id] = number
            # what it was set to, when it is set once (None: set again, an update, a loop's variable)
            self.defs[target.id] = None if target.id in self.defs else value_node
        elif isinstance(target, ast.Tuple | ast.List):
            # `a, b = x, y` keeps each its own taint; any other unpacking gives each part the whole value's
            parts = value_node.elts if isinstance(value_node, ast.Tuple | ast.List) else None
            returned = self.parts.get(id(value_node)) if value_node is not None else None
            if parts is not None and len(parts) == len(target.elts):  # every value before any name is bound:
                taints = [self.expr(v) for v in parts]  # `a, b = b, a` swaps them
                for t, v, taint in zip(target.elts, parts, taints, strict=True):
                    self.assign(t, v, taint)
            elif returned is not None and len(returned) == len(target.elts):  # a helper's tuple, part by part
                for t, part in zip(target.elts, returned, strict=True):
                    self.assign(t, None, part)
            else:
                for t in target.elts:
                    self.assign(t, None, value)
        # subscripts and attributes as targets are refused by the kernel schema

    def for_loop(self, s: ast.For) -> None:
        it = s.iter
        name = _dotted(it.func) if isinstance(it, ast.Call) else ""
        windowed = False  # bounds that are a window of counts (a tile count is none)
        if name not in _LOOPS:
            self.ctx.add("unbounded-loop", "a for loop must run over range, tl.range or tl.static_range", s)
            bound = self.expr(it)
        else:
            args = _range_args(it)
            for k in it.keywords:  # tuning keywords (num_stages=...) walked too: a call there runs
                if k.arg not in _RANGE_SLOTS:
                    self.expr(k.value)
            if not args:
                self.ctx.add("unbounded-loop", "a loop over a range with no end", s)
                args = [ast.Constant(0)]
            parts = [self.expr(a) for a in args]
            bound = _join(parts)
            windowed = any(t.stepped and not self.tile_count(a) for a, t in zip(args, parts, strict=True))
            # a loop from one count to another (`range(tl.cdiv(n, 1020), tl.cdiv(n, 1000))`, two tile counts) runs
            # only at the counts where they differ: a window, as their difference is
            if len(args) >= 2 and all(t.count and not t.index and not t.static for t in parts[:2]):
                windowed = True
            for a, t in zip(args, parts, strict=True):
                if t.data:
                    self.ctx.add("value-branch", "a loop bound depends on loaded values", a)
                if t.pointer:
                    self.ctx.add("pointer-origin", "a pointer is used as a loop bound", a)
            end = parts[1] if len(args) >= 2 else parts[0]
            if end.programs:
                self.ctx.add(
                    "hidden-boundary",
                    "a loop ends at a multiple of the program count (`range(pid, num_programs * 64, num_programs)`): "
                    "it covers a fixed number of steps, not the rows",
                    s,
                )
            if len(args) >= 3 and not self.positive_step(args[2]):
                self.ctx.add(
                    "unbounded-loop",
                    "a loop step must be a positive literal, a constexpr given a positive value, or the program "
                    "count, or a name set once (and nowhere else) to one: a step that can be zero never ends",
                    args[2],
                )
        fixed = not (bound.grid or bound.lane or bound.data or bound.pointer)  # a fixed number of trips
        loop = Taint(
            trips=fixed,
            data=bound.data,
            grid=bound.grid,
            lane=bound.lane,
            count=bound.count,
            stepped=bound.stepped,
            index=True,
            rising=True,
            curved=bound.curved,
        )
        self.assign(s.target, None, loop)
        # How many times the body runs is the bounds' to say. A value carried from one iteration to the next (an
        # accumulator: read in the body before the body assigns it) holds that number: counted, it depends on how
        # many rows came. Bounds that are a window of counts (`rows // 777 - rows // 778`; a tile count
        # `cdiv(rows, R)` is none: every row is in one of its tiles) make the body run only at some counts: what it
        # stores or assigns depends on that window, as under an `if` on one (`window_test`).
        iterations = Taint(count=bound.count, stepped=bound.stepped)
        for held in _carried(s.body):
            self.env[held] = self.env.get(held, INDEX) | iterations
            if self.env[held].index:  # a row carried round a loop (`r = r + r`): what the loop made of it may wrap
                self.env[held] = replace(self.env[held], scaled=True, overflow=True)
        outer = self.control
        if windowed:
            self.control = outer | WINDOWED
        self.loop_body(s.body + s.orelse)
        self.control = outer

    def fixed_test(self, node: ast.expr) -> bool | None:
        """An `if`'s outcome when it depends only on constexprs whose values the launch fixes (`if TOGETHER:`,
        `if POSITIONS == 0:`): Triton compiles only that branch, so the other never runs; None otherwise."""
        # a constexpr the body sets again is no longer the plan's number (`if BLOCK < 0: ROWS = 2` decides nothing)
        known = {name: self.values[name] for name in self.constexprs if name in self.values and not self.stores[name]}
        value = _static_value(node, known)
        return None if value is None else bool(value)

    def loop_body(self, body: list[ast.stmt]) -> None:
        """Run the body until the names it changes stop changing (a value can flow from one iteration to the
        next: a loop-carried pointer or accumulator); the names after it are the join of 0..n iterations."""
        known = dict(self.values)
        for attempt in range(2 * _MAX_LOOP_PASSES):
            if attempt == _MAX_LOOP_PASSES:  # not settled: a value handed down a chain of names longer than the
                # passes (`c9 = c8; ...; c1 = n_rows`): every name the body sets may hold what any of them holds
                assigned = {
                    n.id
                    for st in body
                    for n in ast.walk(st)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                }
                widest = _join(self.env[n] for n in assigned if n in self.env)
                self.env.update({n: self.env[n] | widest for n in assigned if n in self.env})
            before = dict(self.env)
            self.block(body)
            self.env = _merge(before, self.env)
            if self.env == before:
                break
        else:
            self.ctx.add("unbounded-loop", "a loop's values did not settle: what it carries is not followed", body[0])
        # a number set in the body holds after it only where it held before (the loop may run no trip, or many)
        self.values = {k: v for k, v in self.values.items() if known.get(k) == v}

    def tile_count(self, node: ast.expr) -> bool:
        """Whether `node` is a count of tiles covering a count: `tl.cdiv(rows, R)` or `(rows + R - 1) // R`, rows a
        count or a shape as given (not itself stepped), R a constant or constexpr; or a name set once to one."""
        if isinstance(node, ast.Name):
            named = self.defs.get(node.id)
            return named is not None and not isinstance(named, ast.Name) and self.tile_count(named)
        if isinstance(node, ast.Call) and _dotted(node.func) == "tl.cdiv" and len(node.args) == 2:
            whole, tile = node.args
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.FloorDiv)
            and isinstance(node.left, ast.BinOp)
            and isinstance(node.left.op, ast.Sub)
            and isinstance(node.left.right, ast.Constant)
            and node.left.right.value == 1
            and isinstance(node.left.left, ast.BinOp)
            and isinstance(node.left.left.op, ast.Add)
            and ast.dump(node.left.left.right) == ast.dump(node.right)
        ):
            whole, tile = node.left.left.left, node.right
        else:
            return False
        counted = self.expr(whole)
        # R any number fixed for the launch: a zero is a division by zero when it compiles, never a window
        return not (counted.stepped or counted.window or counted.data or counted.pointer) and self.expr(tile).static

    def divides_into_tiles(self, node: ast.expr | None) -> bool:
        """Whether a row divided by (or reduced modulo) `node` is a place in tiles: `node` a shape or count
        parameter as passed (`unit // seq`) or a tile count (`unit % tl.cdiv(positions, P)`). By anything else
        built from sizes (`row % (heads * 100 + 1)`) it singles out rows as a fixed number would."""
        if isinstance(node, ast.Name) and node.id in self.params:
            return True
        return node is not None and self.tile_count(node)

    def as_tile_count(self, node: ast.expr, out: Taint) -> Taint:
        """`out` as a tile count where `node` is one (`tl.cdiv(rows, R)`): a size, no window and no fixed offset."""
        return replace(out, window=False, size=True, nudged=False, tiled=True) if self.tile_count(node) else out

    def positive_step(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, int) and not isinstance(node.value, bool) and node.value > 0
        if isinstance(node, ast.Name):
            return node.id in self.positive
        if isinstance(node, ast.Call):
            return _dotted(node.func) == "tl.num_programs"
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            return self.positive_step(node.left) and self.positive_step(node.right)
        return False

    def factor(self, node: ast.expr | None) -> float | None:
        """The number a factor fixed for the launch holds where it is known (a literal, a constant, a constexpr the
        plan gives a number); a family's expression (a block width) is at least 1 and returns inf; None: unknown."""
        number = _number(node)
        if number is not None:
            return number
        if isinstance(node, ast.Name):
            if node.id in self.values:
                return self.values[node.id]
            return math.inf if node.id in self.positive else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            left, right = self.factor(node.left), self.factor(node.right)
            return None if left is None or right is None else left * right
        return None

    def scale(self, out: Taint, row: Taint, other: Taint, other_node: ast.expr | None, node: ast.AST) -> Taint:
        """A row times `other`: its sign (a negative factor makes it fall; one of unknown sign curves it) and
        whether it may wrap in 32 bits (a fixed factor over _SAFE_FACTOR, or a second factor, before a widening)."""
        if row.trips and other.count and not other.static:
            self.ctx.add(
                "hidden-boundary",
                "a loop of a fixed number of trips steps by a count (`i * num_programs`, i over `tl.static_range(T)`): "
                "it covers a fixed number of steps, and rows past them are never reached",
                node,
            )
        if other.neg and not other.static:
            return replace(out, curved=True)  # a row times a size that may be negative: rising or falling, no bound
        big = False
        if other.static:
            number = self.factor(other_node)
            if number is None:
                return replace(out, curved=True)  # a name of unknown sign: rising or falling, no bound
            if number < 0:
                out = out.negated()
            if number != math.inf and number != int(number):
                return replace(out, curved=True)  # a row times a fraction: cast back, it steps at chosen rows
            big = abs(number) > _SAFE_FACTOR
        overflow = not row.wide and (big or row.scaled)
        return replace(out, scaled=True, overflow=out.overflow or overflow)

    def test(self, node: ast.expr, what: str) -> Taint:
        """Checks a condition (an `if`, a `while`, a conditional, a `tl.where`) and returns its taint."""
        t = self.expr(node)
        self.one_sided(t, what, node)
        if t.data:
            self.ctx.add("value-branch", f"{what} decides on loaded values: a kernel may not branch on its data", node)
        if t.pointer:
            self.ctx.add("pointer-origin", f"{what} decides on a pointer", node)
        return t

    def one_sided(self, t: Taint, what: str, node: ast.AST) -> None:
        if t.below and t.above:
            self.ctx.add(
                "row-pick",
                f"which row is bounded from both sides by {what}: that can single out rows a sample of programs "
                "never runs",
                node,
            )

    def row_compare(self, node: ast.Compare, parts: list[Taint]) -> Taint:
        """Which row compared as a bound, and from which side: `row < n_rows` holds below a bound, `pid >= units`
        above one. Any other comparison of a row can single out rows (`row != 77777`, `row * row == 77777 * row`)
        that a CPU's sample of programs runs only when it draws them."""
        rows = [i for i, p in enumerate(parts) if p.index]
        if not rows:
            if (
                any(p.count for p in parts)
                and not any(p.data or p.pointer or p.stepped for p in parts)  # a window is count-window's
                and not _lane_bound(node, parts, self.params)
            ):
                self.ctx.add(
                    "hidden-boundary",
                    "a condition on how many rows or programs alone (`num_programs * num_programs <= 4 * "
                    "num_programs`): a dispatch inside the kernel the plan does not declare",
                    node,
                )
            return INDEX
        if any(parts[i].overflow for i in rows):
            self.ctx.add(
                "row-pick",
                f"which row, scaled past what 32 bits hold (a factor over {_SAFE_FACTOR:,}, or a second factor, "
                "before a cast to 64 bits), is compared: it wraps at some rows, and a bound of it holds for chosen "
                "rows only",
                node,
            )
        if any(isinstance(op, ast.Eq | ast.NotEq | ast.Is | ast.IsNot | ast.In | ast.NotIn) for op in node.ops):
            self.ctx.add("row-pick", "which row is compared by equality: a row singled out, not a bound", node)
        if len(rows) > 1:
            self.ctx.add("row-pick", "which row is compared with a row: the bound moves with the row", node)
        if any(parts[i].curved or (parts[i].rising and parts[i].falling) for i in rows):
            self.ctx.add(
                "row-pick",
                "which row, made curved (a product of rows, a remainder, quotient or power of one by a fixed number, "
                "a function of one), is compared: a bound of it can hold for chosen rows only",
                node,
            )
        if any(p.nudged for p in parts):
            self.ctx.add(
                "hidden-boundary",
                "which row is compared with a side moved by a fixed number (`row - 32768 < 0`): a dispatch boundary "
                "the plan does not declare",
                node,
            )
        below = above = False
        for k, op in enumerate(node.ops):
            left, right = parts[k], parts[k + 1]
            if not (left.index or right.index) or not isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE):
                continue
            under = isinstance(op, ast.Lt | ast.LtE) == left.index  # row on the left of <, or the right of >
            if (left if left.index else right).falling:
                under = not under
            below, above = below or under, above or not under
        return Taint(below=below, above=above)

    def boundary(self, node: ast.Compare | ast.Call, operands: list[ast.expr], parts: list[Taint]) -> None:
        """A size the call grows with (a program id, a shape, a loop over them) compared with a number fixed for
        the launch is a dispatch boundary inside the kernel: rows past 32,768 left unwritten, say. The plan's
        dispatch (`max_rows`) is the one way to have one: the judge draws both of its sides."""
        if not any(p.grid for p in parts):
            return
        for operand, part in zip(operands, parts, strict=True):
            trivial = isinstance(operand, ast.Constant) and operand.value in (0, 1)
            if part.static and not trivial:
                self.ctx.add(
                    "hidden-boundary",
                    "a size the call grows with (program id, shape, loop) is compared with a fixed number: a "
                    "dispatch boundary the plan does not declare",
                    node,
                )
                return

    def window_test(self, node: ast.expr) -> bool:
        """Whether an `if` on `node` runs only at a window of counts: a count divided, reduced or passed through a
        function, compared with a fixed number, with a window of counts (`row < (n_rows // 15 - n_rows // 16) *
        n_rows`: every row at 15 rows, none at 16) or taken as it is (`(n_rows % 777) // 776 > 0`). One compared
        with another count is a bound (`pid < units`, units a tile count: q's programs before k's) and decides
        nothing of an answer; a loop's bounds neither (a tile count, `cdiv(positions, P)`, is one)."""
        if isinstance(node, ast.BoolOp):
            return any(self.window_test(v) for v in node.values)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self.window_test(node.operand)
        tested = self.expr(node)
        if not tested.stepped:
            return False
        if isinstance(node, ast.Compare):  # against a fixed number, or against a window itself (a row against one)
            return tested.window or any(self.expr(side).static for side in [node.left, *node.comparators])
        return True

    def sign_test(self, node: ast.expr) -> bool:
        """Whether `node` compares loaded values, scaled but not shifted, with zero: a sign split such as an
        activation's `tl.where(x < 0, 0, x)` or tanh's sign, which holds on every input. Any other comparison of
        data (`x - 3.7 < 0`, `x == x`, a band) is a threshold only some inputs cross."""
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
            return False
        if not isinstance(node.ops[0], ast.Lt | ast.LtE | ast.Gt | ast.GtE):
            return False
        sides = (node.left, node.comparators[0])
        zero = [isinstance(e, ast.Constant) and type(e.value) in (int, float) and e.value == 0 for e in sides]
        if zero.count(True) != 1:
            return False
        other = self.expr(sides[zero.index(False)])
        return not other.pointer and not other.shifted

    # ------------------------------------------------------------------ expressions

    def expr(self, node: ast.expr | None) -> Taint:
        if node is None or isinstance(node, ast.Constant):
            return INDEX
        if isinstance(node, ast.Name):
            if node.id in self.ctx.kernels and node.id not in self.env and id(node) not in self.combiners:
                self.ctx.add(
                    "kernel-value",
                    f"the source's kernel {node.id} is used as a value: a kernel is only called, or passed by its "
                    "name as a tl.reduce or tl.associative_scan combine function (what else it would run is not "
                    "followed)",
                    node,
                )
            return self.env.get(node.id, INDEX)  # tl, constants of the source, builtins: no data
        if isinstance(node, ast.Attribute):
            if node.attr in _STATIC_ATTRS or _dotted(node).startswith("tl."):
                return INDEX
            return self.expr(node.value)  # .T and the like: the same values
        if isinstance(node, ast.BinOp):
            out = self.binop(node.op, self.expr(node.left), self.expr(node.right), node)
            return self.as_tile_count(node, out)
        if isinstance(node, ast.UnaryOp):
            value = self.expr(node.operand)
            if value.pointer:
                self.ctx.add("pointer-origin", "arithmetic on a pointer other than adding an offset", node)
            if isinstance(node.op, ast.USub):
                return value.negated()  # -row falls
            if isinstance(node.op, ast.Not | ast.Invert):  # not (row < n) holds above n; ~row is -row - 1
                return replace(
                    value.inverted(), curved=value.curved or (value.index and isinstance(node.op, ast.Invert))
                )
            return value
        if isinstance(node, ast.BoolOp):
            return _join(self.expr(v) for v in node.values)
        if isinstance(node, ast.Compare):
            parts = [self.expr(node.left), *(self.expr(c) for c in node.comparators)]
            if any(p.data for p in parts) and not self.sign_test(node):  # `(tl.sum(w) < 0.6 * n).to(tl.float32)`
                self.ctx.add(
                    "value-branch",
                    "loaded values are compared with a threshold: the comparison picks an answer however its result "
                    "is used (a sign split, `x < 0`, is the one allowed)",
                    node,
                )
            if any(p.pointer for p in parts):
                self.ctx.add("pointer-origin", "a pointer is compared (its address is not the kernel's to read)", node)
            self.boundary(node, [node.left, *node.comparators], parts)
            return self.row_compare(node, parts) | Taint(
                data=any(p.data for p in parts),
                grid=any(p.grid for p in parts),
                lane=any(p.lane for p in parts),
                count=any(p.count for p in parts),
                stepped=any(p.stepped for p in parts),
                window=any(p.window for p in parts),
                below=any(p.below for p in parts),  # `cols < tl.where(row < n_rows, N, 0)` bounds the row too
                above=any(p.above for p in parts),
            )
        if isinstance(node, ast.IfExp):
            tested = self.test(node.test, "a conditional expression")
            picked = (self.expr(node.body) | self.expr(node.orelse)).curve_if_row()  # a row picked is piecewise
            picked = picked | tested.bounds()
            return picked | WINDOWED if self.window_test(node.test) else picked
        if isinstance(node, ast.Subscript):
            return self.expr(node.value) | Taint(data=self.expr(node.slice).data)
        if isinstance(node, ast.Slice):
            return _join(self.expr(p) for p in (node.lower, node.upper, node.step))
        if isinstance(node, ast.Tuple | ast.List):
            return _join(self.expr(e) for e in node.elts)
        if isinstance(node, ast.Call):
            return self.as_tile_count(node, self.call(node))
        return _join(self.expr(c) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr))

    def binop(self, op: ast.operator, left: Taint, right: Taint, node: ast.AST) -> Taint:
        if left.pointer or right.pointer:
            offset_only = isinstance(op, ast.Add | ast.Sub) and not (left.pointer and right.pointer)
            if isinstance(op, ast.Sub) and right.pointer:
                offset_only = False  # offset - pointer is no address of any tensor
            if not offset_only:
                self.ctx.add("pointer-origin", "arithmetic on a pointer other than adding an offset", node)
        if isinstance(node, ast.BinOp):
            sides = (node.left, node.right)
        else:
            sides = (node.target, node.value) if isinstance(node, ast.AugAssign) else (None, None)
        if isinstance(op, ast.Sub):
            right = right.negated()  # a row subtracted falls
        out = left | right
        if left.index or right.index:  # an offset from which row is still which row: no size
            out = replace(out, size=False)
        if left.lane or right.lane:
            out = replace(out, bent=out.bent or _bends_a_lane(op, left, right, sides))
        if isinstance(op, ast.Add | ast.Sub):  # data plus a constant, a shape, a constexpr: zero moved
            if left.index and right.index:  # a row plus a row is a row scaled (`r + r`); twice, it may wrap
                twice = left.scaled and right.scaled and not (left.wide or right.wide)
                out = replace(out, scaled=True, overflow=out.overflow or twice)
            if _moved_by_a_number(left, right, sides):
                out = replace(out, nudged=True)
            if (left.trips and right.grid) or (right.trips and left.grid):  # `tile * R + r`: a row of a tile
                out = replace(out, trips=False)
            if (left.tiled or right.tiled) and not (left.index or right.index):
                out = replace(out, window=True, stepped=out.count)  # tile counts combined: `cdiv(n, 777) - ...`
            if left.data and right.data:  # data plus data crosses zero where its terms balance (`x - w`, `x*x - 7*x`),
                # unless every term is an odd power of one loaded value with one sign (GELU's `x + 0.044715*x*x*x`)
                return out if _one_signed_odd(node) else out.moved()
            return out.moved() if left.data != right.data else out
        if isinstance(op, ast.Mult):
            if left.index and right.index:
                return replace(out, curved=True)  # a product of rows
            if left.index:
                return self.scale(out, left, right, sides[1], node)
            if right.index:
                return self.scale(out, right, left, sides[0], node)
            return out
        if right.index or (left.index and right.static):  # `n // row`, `row % 77777`, `row ** 2`, `row & 1`
            out = replace(out, curved=True)
        elif left.index and not (  # `row % (heads * 100 + 1)`, `row ^ n_cols`, `row >> n_cols`
            isinstance(op, ast.FloorDiv | ast.Mod | ast.Div) and self.divides_into_tiles(sides[1])
        ):
            out = replace(out, curved=True)
        # a size divided (or reduced, a power, bits of it) changes at some sizes only; an index divided by anything
        # is a place in a tile (`unit // blocks`), unless what divides it is itself such a window
        windowed = left.window or right.window or (left.size and not left.index)
        out = replace(out, window=windowed)
        if isinstance(op, ast.Div):
            return out.stepped_if_count()  # a count made a fraction: compared, a threshold of it
        return out.moved().stepped_if_count()  # %, //, powers, bit operations

    def call(self, node: ast.Call) -> Taint:
        name = _dotted(node.func)
        args = {i: a for i, a in enumerate(node.args)}
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        if name in _READ_APART:  # what the cases below do not read (volatile=, cache_modifier=, an axis): walked
            kept = _READ_APART[name]
            for i, a in args.items():
                if i >= len(kept):
                    self.expr(a)
            for k, v in kw.items():
                if k not in kept:
                    self.expr(v)
        if name == "tl.load":
            pointer = self.address(args.get(0, kw.get("pointer")), self.ctx.readable, "load", node)
            self.mask(args.get(1, kw.get("mask")), node, "load", pointer.points, pointer)
            filled = _join(self.expr(other) for other in (args.get(2), kw.get("other")))
            return DATA | Taint(count=filled.count, stepped=filled.stepped)  # masked lanes hold `other`
        if name == "tl.store":
            value = self.expr(args.get(1, kw.get("value"))) | self.control
            if value.count:  # first: of a store, what it writes is the finding to name
                self.ctx.add(
                    "count-value",
                    "a stored value depends on the program id, the row count or a stride other than through what "
                    "it loads: a row's answer may not change with which row it is or how many came with it",
                    node,
                )
            pointer = self.address(args.get(0, kw.get("pointer")), self.ctx.writable, "store", node)
            self.mask(args.get(2, kw.get("mask")), node, "store", pointer.points, pointer | value)
            return INDEX
        if name == "tl.where":
            cond = args.get(0, kw.get("condition"))
            if cond is not None and not self.sign_test(cond):
                self.test(cond, "a tl.where condition")
            picked = _join(self.expr(a) for a in [*node.args[1:], *(v for k, v in kw.items() if k != "condition")])
            chosen = self.expr(cond) if cond is not None else INDEX
            if chosen.stepped:  # a window of counts picks the answer (a bound check `row < n_rows` only masks)
                picked = picked | WINDOWED
            bounds = chosen.bounds()  # what it picks holds on that side of the row
            return picked.moved().curve_if_row() | bounds  # a row picked is piecewise
        if name == "tl.program_id":
            return INDEXED
        if name == "tl.num_programs":
            return replace(SIZED, programs=True)
        if name == "tl.arange":
            return Taint(lane=True)
        if name in self.ctx.kernels:
            return self.inline(name, node)
        if name in _CAPS and node.args:  # min(rows, 32768) caps a size as `rows < 32768` would split it
            self.boundary(node, list(node.args), [self.expr(a) for a in node.args])
        method, receiver = "", INDEX
        if isinstance(node.func, ast.Attribute) and not name.startswith("tl."):
            method, receiver = node.func.attr, self.expr(node.func.value)  # a value's method: x.to(...)
        combined = self.combined(node)  # first: it marks the combine functions it walks
        values = [self.expr(a) for a in node.args] + [self.expr(v) for v in kw.values()] + combined
        everything = _join([receiver, *values])
        shaping = name in _POINTER_SHAPING or method in _POINTER_SHAPING  # reshapes or annotates, computes nothing
        to = method in ("to", "cast")  # x.to(...) and x.cast(...): the same conversion
        if not to and not shaping:
            everything = everything.curve_if_row()  # a function of a row (`tl.abs(row - 77777)`) bounds no rows
            everything = replace(everything, bent=everything.bent or everything.lane)
        widening = to and _to_wide_float(node)  # x.to(tl.float32): the same values; to a narrower float, a
        # scaled value flushes to zero below its smallest subnormal: `(x * 3e-11).to(tl.float16) > 0` is `x > 1000`
        if not widening and name != "tl.abs":
            everything = everything.moved()  # a function of the data: where it crosses zero is its own
            if not shaping:
                everything = everything.stepped_if_count()  # a function of a count: its windows are its own
                sized = any(v.size and not v.index for v in [receiver, *values])
                everything = replace(everything, window=everything.window or sized)
        bitcast = kw.get("bitcast")
        cast = to or name == "tl.cast"
        at = 1 if name == "tl.cast" else 0  # the type: tl.cast(x, tl.int32), x.to(tl.int32), or dtype=
        target = node.args[at] if len(node.args) > at else kw.get("dtype")
        cast_of = values[0] if name == "tl.cast" and values else receiver
        if cast and target is not None and _dotted(target) in _INT_TYPES and cast_of.data:
            self.ctx.add(
                "value-bits",
                "a loaded value is converted to an integer: out of its range the interpreter and a GPU disagree "
                "(NumPy gives the least integer, a GPU saturates), and its steps pick bands of values",
                node,
            )
        if cast and bitcast is not None and not _number_is(bitcast, 0):
            if cast_of.data:
                self.ctx.add(
                    "value-bits",
                    "a loaded value is reinterpreted as bits (bitcast): integer arithmetic on them can pick a band "
                    "of values with no comparison",
                    node,
                )
        if to and any(_dotted(a) in _WIDE_TYPES for a in [*node.args, *kw.values()]):
            everything = replace(everything, wide=True)  # products after it do not wrap (what wrapped before stays)
        elif cast and target is not None and _dotted(target) not in _INT_TYPES:
            # a row made a float: scaled and cast back (`(row.to(tl.float32) * 0.000653).to(tl.int32)`) it steps at
            # rows of the author's choosing
            everything = everything.curve_if_row()
        if everything.pointer and not shaping:
            what = f"`{name or method}`"
            self.ctx.add(
                "pointer-origin", f"{what} of a pointer: a pointer is only offset, loaded from or stored to", node
            )
            return Taint(data=True, shifted=True)  # a number now, and not one an address may be built from
        return everything

    def combined(self, node: ast.Call) -> list[Taint]:
        """A source kernel passed as a value (`tl.reduce(x, 0, _combine)`, `tl.associative_scan`): walked as called
        on the operand, each of its parameters holding what the operand holds; what it returns."""
        operand = node.args[0] if node.args else None
        out = []
        if _dotted(node.func) not in _COMBINERS:
            return out
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(arg, ast.Name) and arg.id in self.ctx.kernels and arg.id not in self.env:
                self.combiners.add(id(arg))  # passed bare: walked here, no finding
                fn = self.ctx.kernels[arg.id]
                call = ast.copy_location(
                    ast.Call(func=ast.Name(arg.id, ast.Load()), args=[operand or arg] * len(fn.args.args), keywords=[]),
                    node,
                )
                out.append(self.inline(arg.id, call))
        return out

    def row_bounds(self) -> Taint:
        """The sides of which row the statements being walked are bounded from (a helper's callers' too)."""
        return (self.called_under | self.rows).bounds()

    def floor_of(self, test: ast.expr) -> tuple[str | None, bool]:
        """For a plain bound of which row (`pid < units`, `pid >= units`): the side it bounds the row by
        (`ast.dump`), and whether the row is above it in the `if`'s body (else in its `else`). (None, False)
        otherwise."""
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
            return None, False
        op, sides = test.ops[0], (test.left, test.comparators[0])
        if not isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE):
            return None, False
        parts = [self.expr(side) for side in sides]
        rows = [i for i, p in enumerate(parts) if p.index]
        if len(rows) != 1 or parts[rows[0]].falling or parts[rows[0]].curved:
            return None, False
        row_left = rows[0] == 0
        below_in_body = isinstance(op, ast.Lt | ast.LtE) == row_left
        return ast.dump(sides[1 - rows[0]]), not below_in_body

    def rebased(self, arg: ast.expr) -> bool:
        """Whether a call's argument is a row less the one side every bound from below the call sits under holds it
        above (`else: helper(pid - units)` under `if pid < units`): in the callee that row starts at 0, above no
        bound."""
        floors = set(self.floors)
        if len(floors) != 1 or None in floors or self.called_under.above:
            return False
        [floor] = floors
        if isinstance(arg, ast.Name) and self.defs.get(arg.id) is not None:
            arg = self.defs[arg.id]  # a name set once: `kp = pid - units`
        return (
            isinstance(arg, ast.BinOp)
            and isinstance(arg.op, ast.Sub)
            and ast.dump(arg.right) == floor
            and self.expr(arg.left).index
        )

    def inline(self, name: str, node: ast.Call) -> Taint:
        fn = self.ctx.kernels[name]
        if self.depth >= _MAX_DEPTH:
            self.ctx.add("unbounded-loop", f"kernels call each other more than {_MAX_DEPTH} deep", node)
            return DATA
        params = [p.arg for p in fn.args.args]
        env = {p: INDEX for p in params}  # defaults are literals
        passed = [*zip(params, node.args, strict=False), *((k.arg, k.value) for k in node.keywords if k.arg in env)]
        # Its loads and stores sit under the `if`s around the call as well as its own: a bound around the call and
        # another inside the helper single out the rows between, as nested `if`s do; two calls under bounds from
        # two sides leave the rows between them unwritten (`3 * row <= 2 * n_rows` around one, `1024 * row >= 683 *
        # n_rows` around another). Unless the call rebases its row on the bound it sits above (RoPE's k programs
        # take `pid - units` under `pid >= units`, and bound their tile's positions from the other side): that
        # row starts at 0 in the callee, which bounds nothing.
        reach = self.row_bounds()
        rebased = {p for p, a in passed if reach.above and self.rebased(a)}
        if rebased:
            reach = replace(reach, above=False)
        positive = set()
        for p, a in passed:
            env[p] = self.expr(a)
            if p in rebased:
                env[p] = replace(env[p], above=False)  # set under the bound it is rebased on
            if self.positive_step(a):
                positive.add(p)
        values = {k: v for k, v in self.values.items() if k not in params}  # the source's constants
        values |= _literal_defaults(fn)  # a parameter left at its default, unless the call passes it (below)
        for p, _ in passed:  # a parameter the call passes holds what it passes, never its default
            values.pop(p, None)
        for p, a in passed:
            # a number only from literals, constants and constexprs the caller never sets: a name it assigns is a
            # tensor in Triton (`k = 0` then `k = 1` in a loop: a helper's `if K == 1` is decided at run time)
            if any(isinstance(n, ast.Name) and self.stores[n.id] for n in ast.walk(a)):
                continue
            number = self.factor(a)
            if number is not None and number != math.inf:
                values[p] = number
        callee = _Kernel(self.ctx, fn, env, self.depth + 1, frozenset(positive), values)
        callee.control = self.control  # called under an `if` on a window: its stores are too
        callee.called_under = reach
        value = callee.run()
        parts = callee.returned_parts()
        if parts is not None:
            self.parts[id(node)] = parts
        return value

    def address(self, node: ast.expr | None, allowed: frozenset[str], verb: str, call: ast.Call) -> Taint:
        """Checks a load's or store's address and returns its taint (the tensors it may point into)."""
        if node is None:
            return INDEX
        t = self.expr(node)
        if not t.pointer:
            self.ctx.add("pointer-origin", f"a {verb} whose address is not built on a tensor argument", call)
            return t
        if t.data:
            self.ctx.add("value-address", f"a {verb} whose address depends on loaded values", call)
        if t.window:
            self.ctx.add("count-window", f"a {verb} whose address moves with a window of row counts", call)
        if t.curved:
            self.ctx.add(
                "row-pick",
                f"a {verb} whose address is built from which row made curved (a product of rows, a remainder, "
                "quotient or power of one by a fixed number or by sizes combined, a function of one): some rows read "
                "or write another row's place (`row - row % 1531 // 1530`), and a CPU's sample of programs meets them "
                "only when drawn",
                call,
            )
        if self.control.stepped:  # under an `if` or a loop that runs at a window of counts only
            self.ctx.add("count-window", f"a {verb} issued at some row counts only (under a window of them)", call)
        outside = sorted(t.points - allowed)
        if outside:
            if verb == "load":
                self.ctx.add("reads-output", f"a load from an output of the plan ({', '.join(outside)})", call)
            else:
                self.ctx.add("writes-input", f"a store to an input of the plan ({', '.join(outside)})", call)
        return t

    def mask(self, node: ast.expr | None, call: ast.Call, verb: str, tensors: frozenset[str], picked: Taint) -> None:
        """Checks a load's or store's mask; notes the sides of which row it, the ifs around it and the bounds that
        picked its address or value (`picked`) bound `tensors` (those its address may point into) from."""
        t = self.expr(node) if node is not None else INDEX
        # a helper's: the `if`s around its call too; and what picked its address or value: `y * 2` set under two
        # nested `if`s, or picked by two nested `tl.where`s, holds for the rows between their bounds
        reach = self.row_bounds() | t | picked.bounds()
        self.one_sided(
            reach, f"a {verb}'s mask, the ifs around it (and its helper's call) and what picked its value", call
        )
        for tensor in tensors:
            side = self.ctx.sides.setdefault(tensor, {})
            for name, holds in (("below", reach.below), ("above", reach.above)):
                if holds:
                    side.setdefault(name, call)
        if t.data:
            self.ctx.add("value-branch", "a mask depends on loaded values: masks bound indices, not data", call)
        if t.window:
            self.ctx.add("count-window", "a mask picks lanes by a window of row counts", call)
        if t.pointer:
            self.ctx.add("pointer-origin", "a mask is computed from a pointer", call)


_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}  # fmt: skip


def _static_value(node: ast.expr, known: Mapping[str, float]) -> float | None:
    """The number an expression of literals and `known` names is (a comparison or `not` as 0 or 1), else None."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
        return float(node.value)
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _static_value(node.operand, known)
        return None if inner is None else float(not inner)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        left, right = _static_value(node.left, known), _static_value(node.comparators[0], known)
        return None if left is None or right is None else float(_COMPARE[type(node.ops[0])](left, right))
    return None


def _carried(body: list[ast.stmt]) -> set[str]:
    """Names a loop body reads before it assigns them, in the order its statements run (branches walked in order,
    both taken): the values one iteration hands the next. `acc += x` reads acc; `acc = tl.zeros(...)` first does
    not."""
    assigned: set[str] = set()
    carried: set[str] = set()

    def reads(node: ast.AST) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in assigned:
                carried.add(sub.id)

    def targets(node: ast.AST) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                assigned.add(sub.id)

    def walk(stmts: list[ast.stmt]) -> None:
        for st in stmts:
            if isinstance(st, ast.AugAssign):
                if isinstance(st.target, ast.Name) and st.target.id not in assigned:
                    carried.add(st.target.id)  # `acc += x` reads acc first (its target is a store in the AST)
                reads(st.value)
                targets(st.target)
            elif isinstance(st, ast.Assign | ast.AnnAssign):
                if st.value is not None:
                    reads(st.value)
                for t in st.targets if isinstance(st, ast.Assign) else [st.target]:
                    targets(t)
            elif isinstance(st, ast.For):
                reads(st.iter)
                targets(st.target)
                walk(st.body + st.orelse)
            elif isinstance(st, ast.If | ast.While):
                reads(st.test)
                walk(st.body + st.orelse)
            else:
                reads(st)

    walk(body)
    return carried & assigned  # every assignment of the body was walked: what it reads before and writes


def _bends_a_lane(op: ast.operator, left: Taint, right: Taint, sides: tuple[ast.expr | None, ast.expr | None]) -> bool:
    """Whether an operation leaves lanes other than tl.arange's: a lane minus a lane, a product of lanes, a lane
    times zero or moved by a fixed number, a lane divided, a remainder or bits of one (`cols * 0 + 4` is a number)."""
    if isinstance(op, ast.Add | ast.Sub):
        lanes = left.lane and right.lane
        moved = any(
            t.lane and o.static and _number(n) != 0 for t, o, n in ((left, right, sides[1]), (right, left, sides[0]))
        )
        return (lanes and isinstance(op, ast.Sub)) or moved
    if isinstance(op, ast.Mult):
        return (left.lane and right.lane) or any(_number(n) == 0 for n in sides)
    return True


def _lane_bound(node: ast.Compare, parts: list[Taint], params: frozenset[str]) -> bool:
    """Whether a comparison is a block's lanes bounded by a count (`tl.arange(0, HEADS) < n_heads`): the lanes, as
    tl.arange gives them, on the lesser side, on the other a count parameter of the kernel as it was passed (no
    arithmetic: `cols < n_rows - num_programs` is a condition on counts)."""
    if len(parts) != 2 or not isinstance(node.ops[0], ast.Lt | ast.LtE | ast.Gt | ast.GtE):
        return False
    first = isinstance(node.ops[0], ast.Lt | ast.LtE)
    (lesser, greater), bound = (parts if first else parts[::-1]), (node.comparators[0] if first else node.left)
    plain = isinstance(bound, ast.Name) and bound.id in params
    return plain and lesser.lane and not (lesser.count or lesser.bent) and greater.count and not greater.lane


def _moved_by_a_number(left: Taint, right: Taint, sides: tuple[ast.expr | None, ast.expr | None]) -> bool:
    """Whether a sum moves a size or a row by a number fixed for the launch (`row - 32768`, `n_rows - 77777`)."""
    for fixed, other, node in ((left, right, sides[0]), (right, left, sides[1])):
        zero = isinstance(node, ast.Constant) and node.value == 0
        if fixed.static and not fixed.index and not zero and other.grid:  # a static_range row is no number
            return True
    return False


def _number(node: ast.expr | None) -> float | None:
    """The number a literal is (`3`, `-1`, `tl.constexpr(-1)`), None for anything else."""
    if isinstance(node, ast.Call) and _dotted(node.func) in ("tl.constexpr", "triton.language.constexpr"):
        return _number(node.args[0]) if len(node.args) == 1 else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _number(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    return None


def _number_is(node: ast.expr, value: float) -> bool:
    """Whether `node` is the literal `value` (False for a name: `bitcast=flag` may be true)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return node.value == bool(value)
    return _number(node) == value


def _constants(tree: ast.Module) -> dict[str, float]:
    """The source's constants (`FLIP = tl.constexpr(-1)`, as the kernel schema reads them), each set once: a row's
    factor by name. One set twice is left unknown."""
    counts: Counter[str] = Counter()
    values: dict[str, float] = {}
    for stmt in tree.body:
        if (name := constant_name(stmt)) is not None and (number := _number(stmt.value)) is not None:
            counts[name] += 1
            values[name] = number
    return {k: v for k, v in values.items() if counts[k] == 1}


def _constexpr_params(fn: ast.FunctionDef) -> frozenset[str]:
    """A kernel's constexpr parameters: the annotated ones (the kernel schema allows no other annotation)."""
    return frozenset(a.arg for a in fn.args.args if a.annotation is not None)


def _literal_defaults(fn: ast.FunctionDef) -> dict[str, float]:
    """A kernel's parameters whose defaults are numbers (`POSITIONS: tl.constexpr = 0`)."""
    params = [a.arg for a in fn.args.args]
    named = zip(params[len(params) - len(fn.args.defaults) :], fn.args.defaults, strict=True)
    return {p: number for p, default in named if (number := _number(default)) is not None}


def _merge(a: dict[str, Taint], b: dict[str, Taint]) -> dict[str, Taint]:
    return {k: a.get(k, INDEX) | b.get(k, INDEX) for k in a.keys() | b.keys()}


def _positive_constexpr(value: str) -> bool:
    """A plan's constexpr value: an integer literal, or one of the family's expressions (block widths, counts:
    always at least 1)."""
    try:
        return int(value) > 0
    except ValueError:
        return True


def check_launch(
    source: str, launch: pb.KernelLaunch, roles: Mapping[str, str], *, tree: ast.Module | None = None
) -> list[pb.Finding]:
    """Findings for one launch of a plan: its kernel run with each runtime parameter as the plan's argument
    (`roles`: the family's role of each argument name). [] when every value flows where it may."""
    tree = tree if tree is not None else ast.parse(source)
    kernels = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    fn = kernels.get(launch.kernel)
    if fn is None:
        return []  # the plan check reports it
    params = [p.arg for p in fn.args.args]
    constexprs = _constexpr_params(fn)
    runtime = [p for p in params if p not in constexprs]
    env: dict[str, Taint] = dict.fromkeys(params, INDEX)
    for param, arg in zip(runtime, launch.args, strict=False):
        role = roles.get(arg, SCALAR)
        if role in (INPUT, OUTPUT, INPLACE):
            env[param] = Taint(points=frozenset({arg}))
        elif role == SCALAR:
            env[param] = DATA
        elif role == COUNT:  # grows with the call, and an answer may not depend on it
            env[param] = SIZED
        elif role == STRIDE:
            env[param] = COUNTED
        else:  # a shape (a width): grows with the call, and an answer may depend on it
            env[param] = GRID
    given = dict(launch.constexprs)
    positive = frozenset(p for p in constexprs if p in given and _positive_constexpr(given[p]))
    readable = frozenset(a for a, r in roles.items() if r in (INPUT, INPLACE))
    writable = frozenset(a for a, r in roles.items() if r in (OUTPUT, INPLACE))
    ctx = _Context(kernels, readable, writable, positive)
    values = _constants(tree) | _literal_defaults(fn)  # a constexpr the plan leaves at its default
    for p in runtime:  # a runtime argument is no number, whatever constant it shadows
        values.pop(p, None)
    for p in constexprs:
        if p in given:
            try:
                values[p] = int(given[p])
            except ValueError:
                values.pop(p, None)  # a family's expression: at least 1 (`positive`), its size unknown
    _Kernel(ctx, fn, env, 0, positive, values).run()
    for tensor, side in sorted(ctx.sides.items()):
        if len(side) == 2:  # found at the later of the two
            node = max(side.values(), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
            ctx.add(
                "row-pick",
                f"{tensor} is read or written below a bound of which row in one place and above one in another: the "
                "rows between the two bounds can be left out",
                node,
            )
    return [
        pb.Finding(rule_id=rule, reason=f"{reason} (in {launch.kernel})", line=line)
        for (rule, line), reason in sorted(ctx.findings.items(), key=lambda kv: kv[0][1])  # stable: found first
    ]


def check_plan(source: str, plan: pb.LaunchPlan, roles: Mapping[str, str]) -> list[pb.Finding]:
    """Findings of every launch of a plan whose source already passed the kernel schema and the family's check."""
    return each_launch(check_launch, source, plan, roles)


def each_launch(check, source: str, plan: pb.LaunchPlan, *args) -> list[pb.Finding]:
    """`check(source, launch, *args, tree=...)` of every launch of a plan, one parse, each finding once (two launches
    of one kernel find the same)."""
    tree = ast.parse(source)
    seen: set[tuple[str, str, int]] = set()
    out = []
    for launch in plan.launches:
        for f in check(source, launch, *args, tree=tree):
            key = (f.rule_id, f.reason, f.line)
            if key not in seen:
                seen.add(key)
                out.append(f)
    return out
