"""Which rows a program reads: only rows it writes (a static check of candidate kernel bodies).

Why: a kernel that compares its row with a row far away (equal rows: a recurring token's, a repeated prompt's) can
be wrong only where the two are equal, at one distance. The judge draws equal rows at every distance inside two of
the plan's tiles and the server's sweep at every distance up to the model's longest sequence, but a distance can be
set past any call drawn (a persistent program looking one grid stride ahead: 132 programs x 256 rows on an H100,
33,792 rows; rows of two sequences of a batched prefill). No test reaches every distance, so this closes the door
for every distance: no output row may depend on an input row another program holds.

How: every address is evaluated symbolically, as a polynomial over atoms (program ids and counts, loop trips,
`tl.arange` lanes, the launch's arguments and constexprs; what is divided, reduced, picked, merged by a branch or
carried round a loop becomes one atom named by its operands; what cannot be followed at all is refused). A monomial
holding a *row atom* (a program id or count, the family's count and stride arguments, a loop over them, what is
built from them) is a row part; its **row coordinate** is the monomial with its stride named by the dimension it
strides. Then, for each launch (docs/judge.md has each rule's row and the red-team rounds behind it):

- a row tensor is read at exactly the rows every store of its rows writes on a path that runs with it (a table such
  as RoPE's cos at those rows but the dimensions it lacks; a weight by columns only), and a program writes one set of
  rows of each output;
- a loop over rows hands no loaded value from one trip to the next;
- one store covers at most MAX_TILE_ROWS rows (MAX_FLAT_LANES flat elements) at once, the tile the judge's repeated
  rows cover twice;
- a row tensor's columns are lanes, a loop's trips by one block, or a positive number, bounded by the row's width by
  the access's own mask: no block of columns reaches the next row.

Not covered: RoPE's columns (its widths are constexprs), and rows meeting inside one tile (by design).
Pure and stdlib-only, like kernel_dataflow.

Over 400 lines, one file: one symbolic walk of a kernel's addresses and the rule that reads it; split, each half
would hold the other's vocabulary (atoms, coordinates, paths).
"""

from __future__ import annotations

import ast
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from services.core.kernel_dataflow import (
    COUNT,
    INPLACE,
    INPUT,
    OUTPUT,
    SCALAR,
    SHAPE,
    STRIDE,
    _constants,
    each_launch,
)  # fmt: skip
from services.core.kernel_dataflow import _number as _literal
from services.core.kernel_schema import dotted
from services.core.pb import events_pb2 as pb

RULES = {
    "row-local": "a program reads only rows it writes: every load's row coordinates (program ids, loops over rows and "
    "what is built from them, apart from each tensor's strides) are those of a store on a path that runs with it, "
    "and a program writes one set of rows of each output",
}

# Which rows a family's tensors hold (its ROW_SPACES): by default every tensor's rows are one set (a norm's x and y, a
# residual norm's x, r, s and y), so a load's rows are checked against every store of the program; a family whose
# outputs hold different rows (RoPE: q's heads and k's) names each tensor's; a table read at every output's rows but
# the dimensions it does not have is TABLE + those dimensions (RoPE's cos and sin: "table without:sh", no heads);
# NONE: a tensor without rows (a norm's weight, its bias); ANY: read at any part of a store's rows.
ROWS, ANY, NONE = "rows", "any", "none"
TABLE = "table without:"
# The most rows of its own one store writes at once (a tile's lanes): the judge's repeated rows cover two such tiles
# (services.judge.cases.row_blocks; the row families' grids cover at most as many: row_reduction.MAX_TILE_ROWS)
MAX_TILE_ROWS = 64
# The most flat elements (an MLP's, no width) one store writes at once: the templates' largest block; 32 rows of the
# tiny models' 128-wide rows, where the judge's repeated rows hold 32
MAX_FLAT_LANES = 4096
Mono = tuple[str, ...]  # sorted atoms, repeated for powers
Poly = dict  # Mono -> Fraction
_PASS_THROUGH = frozenset(
    "tl.multiple_of tl.max_contiguous tl.max_constancy tl.reshape tl.view tl.broadcast_to tl.broadcast "
    "tl.expand_dims tl.trans tl.permute reshape view broadcast_to expand_dims trans permute".split()
)
_CASTS = frozenset({"tl.cast", "int"})  # and `.to(dtype)`: an index cast wider (or to a float) is the same number
# dtypes a cast leaves an index as it was; a narrower integer (int32 included) can wrap a large offset to a small one
# (a float rounds an index, 2**38 + n * 768 in float32; an unsigned one shifts and compares as another number)
_WIDE = frozenset({"tl.int64"})
_LOOPS = ("range", "tl.range", "tl.static_range")
# tl.range's keywords that tune how a loop compiles, not which trips it runs
_LOOP_TUNING = frozenset(
    {"num_stages", "loop_unroll_factor", "disallow_acc_multi_buffer", "flatten", "warp_specialize"}
)
_MAX_DEPTH = 8
DATA = "data"  # a value loaded from memory (or built from one): no address, but it may be carried to another row
_ROW = {("pid0",): Fraction(1)}  # a stand-in that says "a row" (a carried value is taken to be one, to be safe)


@dataclass(frozen=True)
class Ptr:
    """A pointer into the plan's tensor argument `tensor`, `offset` elements on."""

    tensor: str
    offset: tuple  # a Poly's items, sorted: hashable


def _poly(items) -> Poly:
    return {m: c for m, c in items if c != 0}


def _items(p: Poly) -> tuple:
    return tuple(sorted(p.items()))


def _add(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, Fraction(0)) + sign * c
    return _poly(out.items())


def _mul(a: Poly, b: Poly) -> Poly:
    out: dict = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            out[m] = out.get(m, Fraction(0)) + ca * cb
    return _poly(out.items())


def _const(v) -> Poly:
    return _poly([((), Fraction(v))])


def _atom(name: str) -> Poly:
    return {(name,): Fraction(1)}


def _number(v) -> Poly | None:
    """A source's number: an integer exactly; a float one opaque atom (it rounds at run time, as fractions do not)."""
    if isinstance(v, float):
        return _atom(f"float:{v!r}")
    return _const(v) if isinstance(v, int) else None


def _canon(p: Poly) -> str:
    return "+".join(f"{c}*{'*'.join(m) or '1'}" for m, c in sorted(p.items())) or "0"


@dataclass(frozen=True)
class Bound:
    """What a mask holds of its lanes: each conjunct `lhs - rhs < 0` ("lt") or `<= 0` ("le"), as a Poly's items."""

    holds: frozenset = frozenset()


@dataclass(frozen=True)
class Access:
    line: int
    tensor: str
    offset: tuple
    path: tuple  # ((branch point, which side), ...): accesses whose paths disagree never run in one program
    bounds: frozenset = frozenset()  # its mask's Bound
    equal: frozenset = frozenset()  # pairs of values (canonical text) the `if`s around it hold equal


@dataclass
class _Facts:
    rows: set = field(default_factory=set)  # atoms that say which row
    strides: set = field(default_factory=set)  # atoms of stride arguments (one stripped from each coordinate)
    widths: set = field(default_factory=set)  # atoms of the row's width (shape arguments, constexprs given one)
    loads: list = field(default_factory=list)
    stores: list = field(default_factory=list)
    unfollowed: list = field(default_factory=list)  # (line, verb): an address not followed
    constants: dict = field(default_factory=dict)  # the source's constants: name -> Poly
    carried: list = field(default_factory=list)  # (line, loop atom, names): loaded values a loop hands its next trip
    lanes: dict = field(default_factory=dict)  # each tl.arange atom -> its number of lanes (None: not a number)
    made: list = field(default_factory=list)  # every merge atom, in the order the walk made them
    # each opaque atom built of lanes -> (its operands' canon, how many values they take at most: None unknown)
    reach: dict = field(default_factory=dict)


class _Walk:
    def __init__(self, facts: _Facts, kernels, fn: ast.FunctionDef, env: dict, site: tuple, path: tuple, depth: int):
        self.facts, self.kernels, self.fn, self.env = facts, kernels, fn, env
        self.site, self.path, self.depth = site, path, depth
        self.loops: tuple = ()  # the atoms of the loops around the statements being walked
        self.equal: frozenset = frozenset()  # what the `if a == b`s around the statements being walked hold equal
        self.moving: frozenset = frozenset()  # names the loops around the statements being walked assign
        # names that hold compile-time values (constexprs, literals and what is built of them alone): only their tests
        # are decided here; a runtime value whose atoms cancel (`n_cols * 0 + 1`) is a 32-bit tensor that wraps
        self.static: set = {a.arg for a in fn.args.args if a.annotation is not None}
        self.returned: list = []

    def rowish(self, value) -> bool:
        p = dict(value.offset) if isinstance(value, Ptr) else value
        return isinstance(p, dict) and any(a in self.facts.rows for m in p for a in m)

    def opaque(self, kind: str, *values) -> Poly | None:
        """What is divided, reduced or picked: one atom named by its operands, a row atom if any operand says a row."""
        if any(v == DATA for v in values):
            return DATA
        if any(not isinstance(v, dict) for v in values):
            return None
        name = f"{kind}({','.join(_canon(v) for v in values)})"
        if any(self.rowish(v) for v in values):
            self.facts.rows.add(name)
        laned = [v for v in values if any(a in self.facts.lanes or a in self.facts.reach for m in v for a in m)]
        if laned:  # `pos // seq`, `pos % seq`: as many values as pos takes, at most (one key for both)
            self.facts.reach[name] = (",".join(_canon(v) for v in laned), _values_taken(laned, self.facts))
        return _atom(name)

    # ---------------------------------------------------------------- statements

    def block(self, body: list[ast.stmt]) -> None:
        for s in body:
            self.stmt(s)

    def stmt(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign):
            value = self.expr(s.value)
            for t in s.targets:
                self.assign(t, s.value, value)
        elif isinstance(s, ast.AnnAssign) and s.value is not None:
            self.assign(s.target, s.value, self.expr(s.value))
        elif isinstance(s, ast.AugAssign):
            self.assign(s.target, None, self.binop(s.op, self.expr(s.target), self.expr(s.value)))
        elif isinstance(s, ast.Expr):
            self.expr(s.value)
        elif isinstance(s, ast.Return):
            self.returned.append(self.expr(s.value) if s.value is not None else None)
        elif isinstance(s, ast.If):
            self.branch(s)
        elif isinstance(s, ast.For):
            self.loop(s)
        elif isinstance(s, ast.While):
            self.expr(s.test)
            self.block(s.body)
        elif isinstance(s, ast.Break | ast.Continue):  # a trip cut short: which rows the rest of it reads is unknown
            self.facts.unfollowed.append((s.lineno, f"a {type(s).__name__.lower()}"))

    def assign(self, target: ast.expr, value_node: ast.expr | None, value) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
            # a value bound to a name is a tensor (Triton makes every assigned number one: `k = 65536` is an i32
            # that wraps), whatever it was built of: only constexprs and the source's constants are decided
            self.static.discard(target.id)
        elif isinstance(target, ast.Tuple):  # every value before any name is bound: `a, b = b, a` swaps them
            parts = value_node.elts if isinstance(value_node, ast.Tuple) else [None] * len(target.elts)
            values = [self.expr(v) if v is not None else None for v in parts]
            if not isinstance(value_node, ast.Tuple):  # a helper's tuple, already evaluated
                values = list(value) if isinstance(value, tuple) and len(value) == len(parts) else values
            for t, value_of in zip(target.elts, values, strict=False):
                self.assign(t, None, value_of)  # a nested tuple binds the values taken above, not its names again

    def branch(self, s: ast.If) -> None:
        moving = {n.id for n in ast.walk(s.test) if isinstance(n, ast.Name)} & self.moving
        decided = None if moving else self.truth(s.test)
        if decided is not None:  # a constexpr's test (`if POSITIONS == 0`): one side is compiled, the other never
            self.block(s.body if decided else s.orelse)
            return
        self.expr(s.test)
        point = (*self.site, id(s))
        # two alternatives of one program; inside a loop different trips take different sides, so every side runs
        # with every other and the branch adds nothing to the path
        yes, no = ((), ()) if self.loops else (((point, True),), ((point, False),))
        before, outer, known = dict(self.env), self.path, self.equal
        self.path, self.equal = (*outer, *yes), known | self.equality(s.test)
        self.block(s.body)
        taken = self.env
        self.env, self.path, self.equal = dict(before), (*outer, *no), known
        self.block(s.orelse)
        self.path = outer
        self.join(s, taken)

    def join(self, s: ast.If, taken: dict) -> None:
        """After an `if`: a name its two sides left with two values is one atom (a row atom where either says a row)."""
        for name in taken.keys() | self.env.keys():
            a, b = taken.get(name), self.env.get(name)
            if a != b:
                self.env[name] = self.merged(f"if{s.lineno}:{name}", a, b)

    def is_static(self, node: ast.expr) -> bool:
        """Whether `node` is fixed at compile time: numbers, constexprs, the source's constants and arithmetic of
        them alone (Python's integers, which never wrap)."""
        if isinstance(node, ast.Constant):
            return isinstance(node.value, bool | int | float)
        if isinstance(node, ast.Name):
            return node.id in self.static or (node.id not in self.env and node.id in self.facts.constants)
        if isinstance(node, ast.BinOp):
            return self.is_static(node.left) and self.is_static(node.right)
        if isinstance(node, ast.UnaryOp):
            return self.is_static(node.operand)
        if isinstance(node, ast.BoolOp | ast.Compare | ast.IfExp):
            return all(self.is_static(sub) for sub in ast.iter_child_nodes(node) if isinstance(sub, ast.expr))
        return False

    def truth(self, test: ast.expr) -> bool | None:
        """A test's value where it is fixed at compile time (constexprs and numbers only), else None."""
        if not self.is_static(test):
            return None
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            a, b = self.expr(test.left), self.expr(test.comparators[0])
            if isinstance(a, dict) and isinstance(b, dict) and set(a) <= {()} and set(b) <= {()}:
                x, y = a.get((), Fraction(0)), b.get((), Fraction(0))
                op = {ast.Eq: x == y, ast.NotEq: x != y, ast.Lt: x < y, ast.LtE: x <= y, ast.Gt: x > y, ast.GtE: x >= y}
                return op.get(type(test.ops[0]))
            return None
        value = self.expr(test)
        if isinstance(value, dict) and set(value) <= {()}:
            return bool(value.get((), 0))
        return None

    def equality(self, test: ast.expr) -> frozenset:
        """`a == b` of two indices, as the pair its true side holds equal (`if N_COLS == BLOCK`: no mask needed)."""
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            a, b = self.expr(test.left), self.expr(test.comparators[0])
            if isinstance(a, dict) and isinstance(b, dict):
                return frozenset({(_canon(a), _canon(b)), (_canon(b), _canon(a))})
        return frozenset()

    def merged(self, name: str, *values):
        value = self._merged(name, *values)
        self.facts.made.append(f"{name}@{'/'.join(map(str, self.site))}")
        return value

    def _merged(self, name: str, *values):
        """One atom for what `values` may be (a branch's merge, a value carried round a loop), keeping a pointer a
        pointer into its tensor; a row atom where any of them says a row."""
        if any(v == DATA for v in values):
            return DATA
        if any(isinstance(v, Bound) for v in values):  # a mask: what every value holds
            held = [v.holds if isinstance(v, Bound) else frozenset() for v in values]
            return Bound(frozenset.intersection(*held))
        atom = f"{name}@{'/'.join(map(str, self.site))}"
        if any(v is not None and self.rowish(v) for v in values):
            self.facts.rows.add(atom)
        ptrs = {v.tensor for v in values if isinstance(v, Ptr)}
        if len(ptrs) == 1 and all(isinstance(v, Ptr) for v in values):
            return Ptr(ptrs.pop(), _items(_atom(atom)))
        if ptrs or any(v is None for v in values):
            return None
        return _atom(atom)

    def loop(self, s: ast.For) -> None:
        if s.orelse:  # Triton runs a for's else block in ways Python does not (after each unrolled trip)
            self.facts.unfollowed.append((s.lineno, "a for ... else (Triton runs its else block after unrolled trips)"))
        bounds = [self.expr(a) for a in s.iter.args] if isinstance(s.iter, ast.Call) else []
        if isinstance(s.iter, ast.Call):  # range(start, stop, step=...): a step by name is the step
            for k in s.iter.keywords:
                if k.arg == "step" and len(bounds) == 2:
                    bounds.append(self.expr(k.value))
                elif k.arg not in _LOOP_TUNING:
                    self.facts.unfollowed.append((s.lineno, f"a loop's `{k.arg}=`"))
        var = f"trips{s.lineno}@{'/'.join(map(str, self.site))}"  # the loop's atom: how many trips it has made
        if any(not isinstance(b, dict) or self.rowish(b) for b in bounds) or not (
            isinstance(s.iter, ast.Call) and dotted(s.iter.func) in _LOOPS
        ):
            self.facts.rows.add(var)  # a loop over rows (or over what cannot be followed): its trips say one
        if isinstance(s.target, ast.Name):
            # range(start, stop, step)'s variable is start + trips * step (trips: this loop's atom)
            start, step = (bounds[0], bounds[2] if len(bounds) > 2 else _const(1)) if len(bounds) > 1 else (None, None)
            known = isinstance(start, dict) and isinstance(step, dict)
            self.env[s.target.id] = _add(start, _mul(_atom(var), step)) if known else _atom(var)
        carried = self.carried(s.body) & self.env.keys()
        made = {var}  # the atoms this loop stands for: its trips, and what its trips carry
        if isinstance(s.target, ast.Name):
            carried.discard(s.target.id)  # set again from the range at every trip, whatever the body did to it
        steps = self.steps(s, var, carried)
        trip = _atom(var)  # how many trips the loop has made
        for name in carried:  # what one trip hands the next: its first value plus the trips times a fixed step
            value = self.env[name]
            if name in steps:
                self.env[name] = self.stepped(value, _mul(trip, steps[name]))
            elif isinstance(value, Ptr | dict):  # anything else: one atom, a row's (to be safe)
                row = Ptr(value.tensor, _items(_ROW)) if isinstance(value, Ptr) else _ROW
                self.env[name] = self.merged(f"carried{s.lineno}:{name}", value, row)
                made.add(f"carried{s.lineno}:{name}@{'/'.join(map(str, self.site))}")
        assigned = frozenset(
            t.id for st in s.body for t in ast.walk(st) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
        )
        for name in carried:  # a mask carried round the loop: what it held before the loop is not what it holds
            if isinstance(self.env[name], Bound):
                self.env[name] = Bound()
            elif isinstance(self.env[name], tuple):  # a tuple carried round it: its elements are not followed
                self.env[name] = None
        entry = dict(self.env)
        mark = len(self.facts.made)
        outer, self.loops, moving = self.loops, (*self.loops, var), self.moving
        self.moving = moving | assigned
        self.block(s.body)
        self.loops, self.moving = outer, moving
        made |= set(self.facts.made[mark:])  # what the trips merged: a flag's `if` picking the rows counts as them
        for name in assigned & entry.keys():  # the loop may run no trip: after it, either value
            if self.env.get(name) != entry[name] and name != getattr(s.target, "id", None):
                self.env[name] = self.merged(f"after{s.lineno}:{name}", entry[name], self.env[name])
        handed = sorted(n for n in carried if _may_hold_data(self.env.get(n)))
        if handed:
            self.facts.carried.append((s.lineno, frozenset(made), handed))

    def carried(self, body: list[ast.stmt]) -> set[str]:
        """Names a loop body reads before it assigns them on every path (the values a trip hands the next): an `if`
        whose test is fixed at compile time walks its one side; any other `if` assigns a name only where both of
        its sides do (an assignment under `if 0 > 1` never runs, and one side's may not)."""
        assigned: set[str] = set()
        carried: set[str] = set()
        every_assigned = {
            t.id for st in body for t in ast.walk(st) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
        }

        def reads(node: ast.AST) -> None:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in assigned:
                    carried.add(sub.id)

        def targets(node: ast.AST, into: set[str]) -> None:
            into.update(t.id for t in ast.walk(node) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store))

        def walk(stmts: list[ast.stmt], into: set[str]) -> None:
            nonlocal assigned
            for st in stmts:
                if isinstance(st, ast.AugAssign):
                    reads(st.target)
                    reads(st.value)
                    targets(st.target, into)
                elif isinstance(st, ast.Assign | ast.AnnAssign):
                    if st.value is not None:
                        reads(st.value)
                    for t in st.targets if isinstance(st, ast.Assign) else [st.target]:
                        targets(t, into)
                elif isinstance(st, ast.If):  # a test of what the body moves is decided at run time
                    moving = {n.id for n in ast.walk(st.test) if isinstance(n, ast.Name)} & every_assigned
                    decided = None if moving else self.truth(st.test)
                    if decided is not None:
                        walk(st.body if decided else st.orelse, into)
                        continue
                    reads(st.test)
                    before = set(assigned)
                    left, right = set(), set()
                    walk(st.body, left)
                    assigned = set(before)
                    walk(st.orelse, right)
                    assigned = before | (left & right)
                    into.update(left & right)
                elif isinstance(st, ast.For | ast.While):
                    reads(st.iter if isinstance(st, ast.For) else st.test)
                    inner = set()
                    before = set(assigned)
                    walk(st.body, inner)  # a loop may run no trip: what it assigns is not assigned after it
                    assigned = before
                else:
                    reads(st)
                assigned |= into

        every: set[str] = set()
        walk(body, every)
        return carried & every_assigned

    def steps(self, s: ast.For, var: str, carried: set[str]) -> dict:
        """The fixed step each carried index or pointer takes a trip (`x_ptrs += BLOCK`), learnt by walking the body
        once with each at its first value plus a probe atom, the walk's findings then dropped; a name whose value
        after a trip is not that plus a step free of probes has none."""
        probes = {n: f"probe{s.lineno}:{n}" for n in carried if isinstance(self.env[n], Ptr | dict)}
        if not probes:
            return {}
        facts, env, path = self.facts, dict(self.env), self.path
        marks = (len(facts.loads), len(facts.stores), len(facts.unfollowed), len(facts.carried))
        for n, probe in probes.items():
            self.env[n] = self.stepped(env[n], _atom(probe))
        self.block(s.body)
        after = {n: self.env.get(n) for n in probes}
        del facts.loads[marks[0] :], facts.stores[marks[1] :], facts.unfollowed[marks[2] :], facts.carried[marks[3] :]
        self.env, self.path = env, path
        out = {}
        for n, probe in probes.items():
            first, last = env[n], after[n]
            if isinstance(first, Ptr) and isinstance(last, Ptr) and first.tensor == last.tensor:
                step = _add(dict(last.offset), dict(first.offset), -1)
            elif isinstance(first, dict) and isinstance(last, dict):
                step = _add(last, first, -1)
            else:
                continue
            step = _add(step, _atom(probe), -1)
            # a fixed step: of nothing the walk mints per site (a loop's trips, a merge of an if inside it: their
            # names hold "@", as do opaque atoms built of them) and no probe
            if not any("probe" in a or "@" in a for m in step for a in m):
                out[n] = step
        return out

    @staticmethod
    def stepped(value, by: Poly):
        return Ptr(value.tensor, _items(_add(dict(value.offset), by))) if isinstance(value, Ptr) else _add(value, by)

    # ---------------------------------------------------------------- expressions

    def expr(self, node: ast.expr | None):
        if node is None:
            return None
        if isinstance(node, ast.Constant):  # a float rounds at run time as exact fractions do not: not followed
            if isinstance(node.value, bool | int):
                return _const(node.value)
            return _atom(f"float:{node.value!r}") if isinstance(node.value, float) else None
        if isinstance(node, ast.Tuple):  # a helper's `return offsets, mask`, unpacked by its caller
            return tuple(self.expr(e) for e in node.elts)
        if isinstance(node, ast.Name):
            return self.env[node.id] if node.id in self.env else self.facts.constants.get(node.id)
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.expr(node.left), self.expr(node.right))
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Invert) and isinstance(node.operand, ast.Compare):  # ~(a >= b) is a < b
                return self.compare(node.operand, negated=True)
            value = self.expr(node.operand)
            if isinstance(node.op, ast.USub) and isinstance(value, dict):
                return _mul(value, _const(-1))
            if isinstance(node.op, ast.UAdd):
                return value
            return self.opaque(type(node.op).__name__, value)
        if isinstance(node, ast.Subscript):  # x[:, None]: the same values, broadcast
            self.expr(node.slice)
            return self.broadcast(self.expr(node.value), node.slice)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.IfExp):  # a constexpr's test picks one side; any other is not followed
            decided = self.truth(node.test)
            if decided is not None:
                return self.expr(node.body if decided else node.orelse)
            sides = [self.expr(node.test), self.expr(node.body), self.expr(node.orelse)]
            return DATA if DATA in sides else None
        if isinstance(node, ast.Attribute):  # `.T` of a loaded tile is still loaded; `.dtype` and the like no index
            value = self.expr(node.value)
            return DATA if value == DATA and node.attr == "T" else None
        if isinstance(node, ast.Compare):
            return self.compare(node)
        parts = [self.expr(sub) for sub in ast.iter_child_nodes(node) if isinstance(sub, ast.expr)]
        return DATA if DATA in parts else None  # bool ops and the like: walked for the loads in them

    def broadcast(self, value, index: ast.expr):
        """`l[:, None]`: the lanes of l on another axis than `l[None, :]`'s (the last, as l's own), so the two never
        cancel (`8 * l[:, None] - 8 * l[None, :]` spans -56..56: read as 0 it hid other programs' rows). Each lane
        atom is named by its axis counted from the right; the last keeps its name."""
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        kept = [i for i, p in enumerate(parts) if not (isinstance(p, ast.Constant) and p.value is None)]
        if len(parts) == len(kept):
            return value  # no axis added
        if len(kept) != 1:
            return None  # more than one axis kept, or none: not followed
        axis = kept[0] - len(parts)
        if axis == -1:
            return value
        moved = {a: f"{a}|axis{axis}" for a in list(self.facts.lanes)}
        for lane, new in moved.items():  # a lane moved to another axis keeps its number of lanes
            self.facts.lanes.setdefault(new, self.facts.lanes[lane])
        return _renamed(value, moved)

    def compare(self, node: ast.Compare, negated: bool = False) -> Bound:
        """A comparison of two indices as the Bound it puts on a mask's lanes (none where it is no `<`-like one);
        `negated`: of its inverse (`~(cols >= n_cols)`)."""
        if len(node.ops) != 1:
            for part in (node.left, *node.comparators):
                self.expr(part)
            return Bound()
        op = node.ops[0]
        if negated:
            inverse = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt}.get(type(op))
            if inverse is None:
                self.expr(node.left)
                self.expr(node.comparators[0])
                return Bound()
            op = inverse()
        if isinstance(op, ast.Gt | ast.GtE):  # `n > x` is `x < n`
            low, high, strict = node.comparators[0], node.left, isinstance(op, ast.Gt)
        elif isinstance(op, ast.Lt | ast.LtE):
            low, high, strict = node.left, node.comparators[0], isinstance(op, ast.Lt)
        else:  # ==, !=, is, in: no bound, but walked for what they load and call
            sides = [self.expr(node.left), self.expr(node.comparators[0])]
            return DATA if DATA in sides else Bound()
        a = self.expr(low)
        if not isinstance(a, dict):
            return DATA if DATA in (a, self.expr(high)) else Bound()
        if self.expr(high) == DATA:  # a loaded value compared: a value, not a mask
            return DATA
        return Bound(frozenset((_items(_add(a, b, -1)), "lt" if strict else "le") for b in self.ceilings(high)))

    def ceilings(self, node: ast.expr) -> list:
        """Values a bound's side is at most: itself; both sides of a minimum; the other side of a `tl.where` whose one
        side is a number not over 0 (`cols < tl.where(row < n_rows, n_cols, 0)`: no lane, or cols < n_cols)."""
        value = self.expr(node)
        out = [value] if isinstance(value, dict) else []
        name = dotted(node.func) if isinstance(node, ast.Call) else ""
        if name in ("tl.minimum", "min") and name not in self.kernels and len(node.args) == 2:
            out += [c for a in node.args for c in self.ceilings(a)]
        elif name == "tl.where" and name not in self.kernels and len(node.args) == 3:
            for this, other in ((node.args[1], node.args[2]), (node.args[2], node.args[1])):
                number = self.expr(other) if self.is_static(other) else None
                if isinstance(number, dict) and set(number) <= {()} and number.get((), 0) <= 0:
                    out += self.ceilings(this)
        return out

    def binop(self, op: ast.operator, a, b):
        if any(isinstance(v, dict) and any(x.startswith("float:") for m in v for x in m) for v in (a, b)):
            return self.opaque(type(op).__name__, a, b)  # float arithmetic rounds: no algebra cancels it
        if a == DATA or b == DATA:  # a mask times a loaded row is the row: data, never a mask
            return DATA
        if isinstance(a, Bound) or isinstance(b, Bound):  # `m1 & m2` holds both; anything else, nothing known
            if isinstance(op, ast.BitAnd):
                return Bound(
                    (a.holds if isinstance(a, Bound) else frozenset())
                    | (b.holds if isinstance(b, Bound) else frozenset())
                )
            return Bound()
        if a == DATA or b == DATA:
            return DATA
        if isinstance(op, ast.Add | ast.Sub):
            sign = 1 if isinstance(op, ast.Add) else -1
            if isinstance(a, Ptr) and isinstance(b, dict):
                return Ptr(a.tensor, _items(_add(dict(a.offset), b, sign)))
            if isinstance(b, Ptr) and isinstance(a, dict) and sign == 1:
                return Ptr(b.tensor, _items(_add(dict(b.offset), a)))
            if isinstance(a, dict) and isinstance(b, dict):
                return _add(a, b, sign)
            return None
        if isinstance(op, ast.Mult) and isinstance(a, dict) and isinstance(b, dict):
            return _mul(a, b)
        return self.opaque(type(op).__name__, a, b)

    def call(self, node: ast.Call):
        name = dotted(node.func) or ""
        args = node.args
        if name in self.kernels:  # the source's own kernel, whatever it is named (`view`, `min`): followed
            if self.depth < _MAX_DEPTH:
                return self.inline(self.kernels[name], node)
            self.facts.unfollowed.append((node.lineno, f"a call of {name} nested past {_MAX_DEPTH} kernels"))
            return None
        if name in _CASTS or (isinstance(node.func, ast.Attribute) and node.func.attr == "to"):
            value = self.expr(node.func.value if name not in _CASTS else (args[0] if args else None))
            dtype = dotted(args[-1] if args and (name not in _CASTS or len(args) > 1) else _keyword(node, "dtype"))
            if name != "int" and dtype not in _WIDE:  # a narrower integer wraps: what it names is not followed
                return self.opaque(f"to:{dtype}", value) if isinstance(value, dict) else value
            return value
        if isinstance(node.func, ast.Attribute) and name not in _PASS_THROUGH and not name.startswith("tl."):
            method = node.func.attr  # x.reshape(...)
            receiver = self.expr(node.func.value)
            given = [self.expr(a) for a in args] + [self.expr(k.value) for k in node.keywords]
            if DATA in (receiver, *given):  # anything made of a loaded value is loaded data (x.ravel(), x.sum())
                return DATA
            return receiver if method in _PASS_THROUGH else None
        if name in ("tl.program_id", "tl.num_programs"):
            axis = self.expr(args[0] if args else _keyword(node, "axis"))
            if not (isinstance(axis, dict) and set(axis) <= {()}):  # an axis is fixed at compile time, or unknown
                self.facts.unfollowed.append((node.lineno, f"{name} of an axis that is no number"))
                return None
            atom = f"{'pid' if name == 'tl.program_id' else 'programs'}{int(axis.get((), 0))}"
            self.facts.rows.add(atom)
            return _atom(atom)
        if name == "tl.arange":
            bounds = [self.expr(a) for a in args]
            if not (len(bounds) == 2 and all(isinstance(b, dict) for b in bounds)):
                return None
            lanes = self.opaque("arange", *bounds)
            start, end = (b.get((), Fraction(0)) if set(b) <= {()} else None for b in bounds)
            self.facts.lanes[next(iter(lanes))[0]] = None if start is None or end is None else int(end - start)
            return lanes
        if name in ("tl.load", "tl.store"):
            self.access(node, name == "tl.store")
            return DATA if name == "tl.load" else None
        if name in _PASS_THROUGH:
            first = self.expr(args[0]) if args else None
            rest = [self.expr(a) for a in args[1:]] + [self.expr(k.value) for k in node.keywords]
            return DATA if DATA in rest else first
        values = [self.expr(a) for a in args] + [self.expr(k.value) for k in node.keywords]
        named = ",".join(str(k.arg) for k in node.keywords)  # `tl.where(c, y=0, x=n)` is not `tl.where(c, 0, n)`
        return self.opaque(f"{name}[{named}]" if named else name, *values)

    def access(self, node: ast.Call, store: bool):
        ptr = self.expr(node.args[0] if node.args else _keyword(node, "pointer"))
        at = 2 if store else 1  # tl.store(pointer, value, mask), tl.load(pointer, mask, other)
        mask_node = node.args[at] if len(node.args) > at else _keyword(node, "mask")
        values = {
            id(a): self.expr(a) for a in [*node.args[1:], *(k.value for k in node.keywords if k.arg != "pointer")]
        }
        mask = values.get(id(mask_node)) if mask_node is not None else None
        if isinstance(ptr, Ptr):
            where = self.facts.stores if store else self.facts.loads
            bounds = mask.holds if isinstance(mask, Bound) else frozenset()
            where.append(Access(node.lineno, ptr.tensor, ptr.offset, self.path, bounds, self.equal))
        else:
            verb = "store" if store else "load"
            self.facts.unfollowed.append(
                (node.lineno, f"a {verb} whose address is no tensor argument plus an offset this check can follow")
            )
        return None

    def inline(self, fn: ast.FunctionDef, node: ast.Call):
        params = [a.arg for a in fn.args.args]
        env: dict = {}
        defaults = fn.args.defaults
        for p, d in zip(params[len(params) - len(defaults) :], defaults, strict=True):
            env[p] = self.expr(d)
        for p, a in zip(params, node.args, strict=False):
            env[p] = self.expr(a)
        for k in node.keywords:
            if k.arg in params:
                env[k.arg] = self.expr(k.value)
        for p in params:
            if p not in env:
                env[p] = _atom(f"{fn.name}.{p}")
        sub = _Walk(self.facts, self.kernels, fn, env, (*self.site, id(node)), self.path, self.depth + 1)
        bound = dict(zip(params[len(params) - len(defaults) :], defaults, strict=True))
        bound |= dict(zip(params, node.args, strict=False)) | {k.arg: k.value for k in node.keywords if k.arg in params}
        sub.static = {p for p, given in bound.items() if self.is_static(given)}
        sub.loops, sub.moving, sub.equal = self.loops, self.moving, self.equal  # called inside a loop: still inside it
        sub.block(fn.body)
        returned = sub.returned  # several returns (dead ones, one on each side of an if): data if any is, else one
        if any(v == DATA for v in returned):
            return DATA
        return returned[0] if returned and all(v == returned[0] for v in returned) else None


def _renamed(value, names: dict):
    """`value` with each atom in `names` renamed (a Poly, a pointer's offset, a mask's bounds, a tuple of them)."""

    def poly(p):
        out: dict = {}
        for m, c in p.items():
            key = tuple(sorted(names.get(a, a) for a in m))
            out[key] = out.get(key, Fraction(0)) + c
        return out

    if isinstance(value, dict):
        return poly(value)
    if isinstance(value, Ptr):
        return Ptr(value.tensor, _items(poly(dict(value.offset))))
    if isinstance(value, Bound):
        return Bound(frozenset((_items(poly(dict(items))), kind) for items, kind in value.holds))
    if isinstance(value, tuple):
        return tuple(_renamed(v, names) for v in value)
    return value  # data, None


def _may_hold_data(value) -> bool:
    """Whether a value may be (or hold) loaded data: data itself, what is not followed, a tuple of either."""
    if isinstance(value, tuple):
        return any(_may_hold_data(v) for v in value)
    return value is None or value == DATA


def _keyword(node: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in node.keywords if k.arg == name), None)


# -------------------------------------------------------------------- the rule


def coordinates(offset: tuple, facts: _Facts) -> dict:
    """An address's row coordinates: its row monomials without their stride atoms, each with its coefficient. A row
    part's scale (`row * N`: N) also marks rows where it multiplies what holds no row atom (`row * N + 7 * N`: seven
    rows on; `(pid * R + tl.arange(0, R)) * N`: the tile's lanes)."""
    return split(offset, facts)[0]


def split(offset: tuple, facts: _Facts) -> tuple[dict, dict]:
    """(the row coordinates, the column part: what is left, a Poly) of an address (`coordinates`)."""
    poly = dict(offset)
    rows = {m: c for m, c in poly.items() if any(a in facts.rows for a in m)}
    scales = {tuple(a for a in m if a not in facts.rows) for m in rows}
    scales.discard(())
    out: dict = {}
    columns: dict = {}
    for m, c in rows.items():
        coord = _unstrided(m, facts)
        out[coord] = out.get(coord, Fraction(0)) + c
    for m, c in poly.items():
        if m in rows:
            continue
        scale = next((sc for sc in sorted(scales, key=len, reverse=True) if _within(sc, m)), None)
        if scale is not None:
            coord = _without(m, scale)
            out[coord] = out.get(coord, Fraction(0)) + c
        else:
            columns[m] = c
    return _poly(out.items()), columns


def within_the_row(access: Access, facts: _Facts) -> bool:
    """Whether an access's columns stay inside its row: none, a block of lanes as wide as the row
    (`tl.arange(0, n_cols)`), or columns its mask bounds by the row's width (`cols < n_cols`, `c0 + cols < n_cols`)."""
    columns = split(access.offset, facts)[1]
    if not columns:
        return True
    if not facts.widths:  # flat elements (an MLP's): no width bounds them; `_findings` matches whole offsets instead
        return True
    if not all(_column_term(m, c, facts) for m, c in columns.items()):
        return False  # negative (`cols - 4 * n_cols`: a row before), or wrapping 32 bits (`n_cols * 65536 * 65536`)
    for width in facts.widths:
        lanes = next(iter(columns))[0] if len(columns) == 1 and next(iter(columns.values())) == 1 else ""
        end = lanes[len("arange(0,") : -1] if lanes.startswith("arange(0,") and len(next(iter(columns))) == 1 else None
        if end is not None and (end == f"1*{width}" or (end, f"1*{width}") in access.equal):
            return True  # `tl.arange(0, n_cols)`, or a block the `if` around it holds as wide as the row
        under = _items(_add(columns, _atom(width), -1))
        at_most = _items(_add(_add(columns, _atom(width), -1), _const(1)))
        if (under, "lt") in access.bounds or (at_most, "le") in access.bounds:
            return True
    return False


_JOINS = ("tl.join(", "tl.cat(", "tl.interleave(", "tl.flip(")  # blocks combined: rows as far apart as they like
_MAX_COLUMN_FACTOR = 1 << 16  # a column term's number: a block's step; past it a product can wrap 32 bits
_MAX_LANE_FACTOR = 1 << 14  # lanes (at most 65,536 of them) times it stay under 2**31


def _column_term(m: tuple, c: Fraction, facts: _Facts) -> bool:
    """A term a row's columns may hold: a block of lanes from 0 times a number (`cols`), a loop's trips times a number
    or one width or constexpr (`c0` stepping by BLOCK), or a positive number; each never negative and never a product
    that can wrap 32 bits (the mask's bound then holds of the wrapped number, not of the address)."""
    if not 0 < c <= _MAX_COLUMN_FACTOR:
        return False
    if m == ():
        return True
    if len(m) == 1 and m[0].startswith("arange(0,") and m[0] in facts.lanes:
        return c <= _MAX_LANE_FACTOR  # every lane, or every other (`2 * tl.arange(0, BLOCK // 2)`): never wrapping
    trips = [a for a in m if a.startswith("trips") and a not in facts.rows]
    rest = [a for a in m if a not in trips]
    if rest and c != 1:  # trips times a block (`c0 += BLOCK`); 32,640 blocks a trip wrap 32 bits on the second
        return False
    return len(trips) == 1 and len(rest) <= 1 and all(a.startswith(("arg:", "constexpr:")) for a in rest)


def _unstrided(m: tuple, facts: _Facts) -> tuple:
    """A row monomial with its tensor's stride named by the dimension it strides, not the tensor: one stride argument
    (`x_row_stride` and `y_row_stride` both "§row_stride", `q_sh` and `qo_sh` "§sh"), else one width (a contiguous
    row's stride: "§row_stride"); a monomial with neither says so ("§none": `x_ptr + row` is not row `row`)."""
    stride = next((a for a in m if a in facts.strides), None)
    if stride is not None:
        return tuple(sorted((*_without(m, (stride,)), f"§{_dimension(stride)}")))
    width = next((a for a in m if a in facts.widths), None)
    if width is not None:
        return tuple(sorted((*_without(m, (width,)), "§row_stride")))
    return tuple(sorted((*m, "§none")))


def _dimension(stride: str) -> str:
    """The dimension a stride argument strides, by its name in the family's vocabulary (`arg:q_sh`: "sh")."""
    name = stride.removeprefix("arg:")
    return name.split("_", 1)[1] if "_" in name else name


def _within(part: tuple, whole: tuple) -> bool:
    """Whether the monomial `part` divides `whole` (each atom at least as often)."""
    need, have = Counter(part), Counter(whole)
    return all(have[a] >= n for a, n in need.items())


def _without(whole: tuple, part: tuple) -> tuple:
    left = Counter(whole)
    left.subtract(Counter(part))
    return tuple(sorted(left.elements()))


def span(coord: dict, facts: _Facts) -> int | None:
    """How many rows one access of these coordinates covers at once: its lanes' reach (a monomial of one tl.arange
    of a known number of lanes, times a number), plus one; None where a lane's reach is not a number."""
    reach = Fraction(0)
    for marked, c in coord.items():
        m = tuple(a for a in marked if not a.startswith("§"))  # the stride it was met at: one row each
        lanes = [a for a in m if a in facts.lanes]
        if not lanes:
            continue
        if len(m) != 1 or facts.lanes[lanes[0]] is None:
            return None
        reach += abs(c) * (facts.lanes[lanes[0]] - 1)
    if any(
        ("arange(" in a and a not in facts.lanes) or a.startswith(_JOINS)
        for m in coord
        for a in m
        if not a.startswith("§")
    ):
        return None  # lanes divided, picked or reordered (`rows // 1`): how many rows they reach is not followed
    return int(reach) + 1


_HEADS = frozenset({"§sh"})  # RoPE's head dimension: the heads of one position are one row of its positions


def _values_taken(polys: list, facts: _Facts) -> int | None:
    """At most how many values sums of lanes take (one access at once): a sum's lane terms span a range as wide as
    their reaches (`64 * half + l`: 64 + 7 + 1), times each opaque atom's own count; None where a term is a lane times
    something else or a count is unknown."""
    total = 1
    for poly in polys:
        width = Fraction(0)
        for m, c in poly.items():
            if not any(a in facts.lanes or a in facts.reach for a in m):
                continue
            if len(m) != 1:
                return None
            count = facts.lanes[m[0]] if m[0] in facts.lanes else facts.reach[m[0]][1]
            if count is None:
                return None
            if m[0] in facts.lanes:
                width += abs(c) * (count - 1)
            else:
                total *= count
        total *= int(width) + 1
    return total


def lanes_within(coord: dict, facts: _Facts) -> int | None:
    """At most how many values coordinates built of lanes take (`pos // seq`, `pos % seq` of a tile of positions
    `pos`: as many as pos takes, counted once); None where that is not followed."""
    keys: dict = {}
    for m in coord:
        for a in m:
            if a.startswith("§"):
                continue
            if a in facts.lanes:
                keys[a] = facts.lanes[a]
            elif a in facts.reach:
                key, count = facts.reach[a]
                keys[key] = count
            elif "arange(" in a:
                return None  # lanes through something not followed
    if any(count is None for count in keys.values()):
        return None
    return math.prod(keys.values())


def _skipping(coord: dict, skips: frozenset) -> dict:
    return {m: c for m, c in coord.items() if not skips & set(m)}


def _together(a: tuple, b: tuple) -> bool:
    """Whether two accesses' paths can run in one program: no branch point taken both ways."""
    sides = dict(a)
    return all(sides.get(point, side) == side for point, side in b)


def _text(coord: dict) -> str:
    if not coord:
        return "no row"
    parts = []
    for m, c in sorted(coord.items()):
        atoms = "*".join(a.split("@")[0] for a in m if not a.startswith("§")) or "1"
        stride = next((a[1:] for a in m if a.startswith("§")), None)
        atoms += f" (by {stride})" if stride and stride != "row_stride" else ""
        parts.append(atoms if c == 1 else f"{c}*{atoms}")
    return " + ".join(parts)


def check_launch(
    source: str,
    launch: pb.KernelLaunch,
    roles: Mapping[str, str],
    spaces: Mapping[str, str] | None = None,
    owners: Mapping[str, tuple] | None = None,
    *,
    tree: ast.Module | None = None,
) -> list[pb.Finding]:
    """`row-local` findings of one launch of a plan (`roles`: the family's role of each argument; `spaces`: the
    family's ROW_SPACES, where its tensors' rows are not all one set)."""
    tree = tree if tree is not None else ast.parse(source)
    kernels = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    fn = kernels.get(launch.kernel)
    if fn is None:
        return []
    facts = _Facts()
    facts.widths = {f"arg:{a}" for a, role in roles.items() if role == SHAPE}  # a constexpr given one is it too
    constexprs = frozenset(a.arg for a in fn.args.args if a.annotation is not None)
    runtime = [a.arg for a in fn.args.args if a.arg not in constexprs]
    env: dict = {}
    given = dict(launch.constexprs)
    for a in fn.args.args:
        if a.arg in constexprs:
            try:
                env[a.arg] = _const(int(given[a.arg]))
            except (KeyError, ValueError):
                value = given.get(a.arg, "")
                # a family's expression by its name (`cols`: the width argument's value), so two names of one value
                # are one atom; one the plan leaves out by its parameter's
                # (a family's names and the kernel's parameters are two namespaces: `block_cols` may be both)
                named = f"constexpr:{value}" if value else f"param:{a.arg}"
                env[a.arg] = _atom(f"arg:{value}" if roles.get(value) == SHAPE else named)
    for param, arg in zip(runtime, launch.args, strict=False):
        role = roles.get(arg, SCALAR)
        if role in (INPUT, OUTPUT, INPLACE):
            env[param] = Ptr(arg, ())
        elif role == SCALAR:
            env[param] = DATA
        else:
            atom = f"arg:{arg}"
            env[param] = _atom(atom)
            if role in (COUNT, STRIDE):
                facts.rows.add(atom)
            if role == STRIDE:
                facts.strides.add(atom)
    facts.constants = {k: _number(v) for k, v in _constants(tree).items()}
    params = [a.arg for a in fn.args.args]
    for name, default in zip(params[len(params) - len(fn.args.defaults) :], fn.args.defaults, strict=True):
        if name in constexprs and name not in given and (number := _literal(default)) is not None:
            env[name] = _number(number)  # `-1` and `tl.constexpr(-1)` as well as `1`
    _Walk(facts, kernels, fn, env, (), (), 0).block(fn.body)
    return _findings(facts, roles, spaces or {}, owners or {}, launch.kernel)


def _findings(
    facts: _Facts, roles: Mapping[str, str], spaces: Mapping[str, str], owners: Mapping[str, tuple], kernel: str
) -> list[pb.Finding]:
    found: dict[int, str] = {}
    for access in [*facts.loads, *facts.stores]:
        strides = {a.removeprefix("arg:") for m in dict(access.offset) for a in m if a in facts.strides}
        foreign = sorted(s for s in strides if s in owners and access.tensor not in owners[s])
        if foreign:  # q by k's batch stride: under grouped heads another batch's q
            said = f"{access.tensor} is addressed by {', '.join(foreign)}, another tensor's stride"
            found.setdefault(access.line, said)
    stores = [(s, coordinates(s.offset, facts)) for s in facts.stores]
    for i, (a, ca) in enumerate(stores):
        for b, cb in stores[:i]:
            if a.tensor == b.tensor and _together(a.path, b.path) and ca != cb:
                found.setdefault(
                    a.line,
                    f"{a.tensor} is written at rows {_text(ca)} and at rows {_text(cb)} (line {b.line}) by one "
                    "program: a program writes one set of rows of each output",
                )
    for access in [*facts.loads, *facts.stores]:
        if spaces.get(access.tensor, ROWS) == ROWS and not within_the_row(access, facts):
            verb = "written" if access in facts.stores else "read"
            found.setdefault(
                access.line,
                f"{access.tensor} is {verb} at columns {_text(split(access.offset, facts)[1])} no mask bounds by the "
                "row's width: columns past the row's end are the next rows' (a mask `cols < n_cols` bounds them)",
            )
    if not facts.widths:  # flat elements: one block of lanes at most MAX_FLAT_LANES (the templates' largest)
        for store in facts.stores:
            covered = span(dict(store.offset), facts)
            if spaces.get(store.tensor, ROWS) == ROWS and (covered is None or covered > MAX_FLAT_LANES):
                found.setdefault(
                    store.line,
                    f"{store.tensor} is written at {covered or 'a number of'} elements at once: a program covers at "
                    f"most {MAX_FLAT_LANES} flat elements at a time (a few rows: the judge's repeated rows cover them)",
                )
    for store, coord in stores:
        covered = span(coord, facts)
        if spaces.get(store.tensor, ROWS) != ROWS:  # rows of another kind (RoPE's heads at a position): the heads
            coord = _skipping(coord, _HEADS)  # of a position are one row; its positions are capped as rows are
            covered = span(coord, facts) or lanes_within(coord, facts)  # a tile's positions split into batch, seq
        if covered is None or covered > MAX_TILE_ROWS:
            found.setdefault(
                store.line,
                f"{store.tensor} is written at {covered or 'a number of'} rows at once ({_text(coord)}): a program "
                f"covers at most {MAX_TILE_ROWS} rows at a time, each tile's lanes a number of them (the judge's "
                "repeated rows hold equal rows at every distance inside two such tiles)",
            )
    for load in facts.loads:
        if roles.get(load.tensor) not in (INPUT, INPLACE):
            continue
        coord = coordinates(load.offset, facts)
        space = spaces.get(load.tensor, ROWS)
        if space == NONE and not coord:
            continue  # a weight's columns: no row
        if space == NONE or not coord:
            said = f"at rows {_text(coord)}, a tensor without rows" if coord else "at no row of its own (a fixed row)"
            found.setdefault(load.line, f"{load.tensor} is read {said}: a program reads only rows it writes")
            continue
        skips = frozenset(f"§{d}" for d in space.removeprefix(TABLE).split(",")) if space.startswith(TABLE) else None
        mine = [
            (s, cs)
            for s, cs in stores
            if _together(load.path, s.path)
            and (space == ANY or skips is not None or spaces.get(s.tensor, ROWS) == space)
        ]
        if skips is not None:  # a table: exactly the store's rows but the dimensions it skips (RoPE's heads)
            short = next((s for s, cs in mine if coord != _skipping(cs, skips)), None)
        else:  # the same rows as every store of its rows; ANY: at a part of them
            short = next(
                (
                    s
                    for s, cs in mine
                    if (any(cs.get(m) != c for m, c in coord.items()) if space == ANY else cs != coord)
                ),
                None,
            )
        if short is None and not facts.widths and space == ROWS:  # flat elements: the very elements a store writes
            short = next((s for s, cs in mine if s.offset != load.offset), None)
        if not mine or short is not None:
            written = "none of its rows"
            if short is not None:
                written = f"rows {_text(coordinates(short.offset, facts))} of {short.tensor}"
            found.setdefault(
                load.line,
                f"{load.tensor} is read at rows {_text(coord)} where the program writes {written}: a program reads "
                "only rows it writes (a row further on is a distance no test reaches)",
            )
    rows_used = {a for access in facts.loads + facts.stores for m in coordinates(access.offset, facts) for a in m}
    if not facts.widths:  # flat elements: every atom of an address says which elements, each a piece of some row
        rows_used |= {a for access in facts.loads + facts.stores for m, _ in access.offset for a in m}
    for line, made, names in facts.carried:
        if made & rows_used:  # its trips, or a value its trips carry (a flag moving the rows), say which row
            found.setdefault(
                line,
                f"the loop hands loaded values ({', '.join(names)}) from one row to the next: a row's answer may "
                "depend only on its own row",
            )
    for line, what in facts.unfollowed:
        found.setdefault(line, f"{what}: which rows it reads or writes is not followed")
    return [
        pb.Finding(rule_id="row-local", reason=f"{reason} (in {kernel})", line=line)
        for line, reason in sorted(found.items())
    ]


def check_plan(
    source: str,
    plan: pb.LaunchPlan,
    roles: Mapping[str, str],
    spaces: Mapping[str, str] | None = None,
    owners: Mapping[str, tuple] | None = None,
) -> list[pb.Finding]:
    """`row-local` findings of every launch of a plan whose source passed the dataflow check."""
    return each_launch(check_launch, source, plan, roles, spaces, owners)
