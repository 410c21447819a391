"""Data-flow rules of the static check: what the wrapper computes on the host, and where its output comes from.

Flow-insensitive and deliberately simple: a name is "tensor-valued" if any assignment makes it
so, and an output is "written" if its buffer (or a view of it) is handed to a kernel launch
anywhere in the function. What this misses the sandbox catches (poisoned outputs, aliasing
checks); what it flags no honest kernel needs.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

# Methods that return the same data (a view, a layout change or a cast): the result is "the same tensor".
VIEW_METHODS = frozenset(
    {"reshape", "view", "view_as", "contiguous", "flatten", "unsqueeze", "squeeze", "expand", "expand_as",
     "transpose", "permute", "t", "to", "float", "half", "bfloat16", "double", "clone", "detach", "type_as",
     "narrow", "as_strided", "T"}
)  # fmt: skip
# Methods on a tensor that return a tensor (beyond the views): anything computed from it.
TENSOR_METHODS = VIEW_METHODS | frozenset({"new_empty", "new_zeros", "new_ones", "new_full"})
# Attributes and methods that, read off a tensor, mark a parameter as a tensor.
TENSOR_MARKERS = frozenset(
    {"shape", "dtype", "device", "reshape", "view", "contiguous", "stride", "dim", "numel", "size",
     "element_size", "is_contiguous", "data_ptr"}
)  # fmt: skip
# torch functions that allocate a fresh buffer (its contents are whatever the allocator left, or a constant).
ALLOCATORS = frozenset(
    {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
     "new_empty", "new_zeros", "new_ones", "new_full", "tensor", "as_tensor"}
)  # fmt: skip
# Builtins that pull a tensor's data onto the host (float(x[0]), sum(x), list(x) ...).
HOST_READS = frozenset({"float", "int", "bool", "complex", "list", "tuple", "sum", "max", "min", "abs"})

Qualify = Callable[[ast.AST], str]  # a call's function as a dotted, import-resolved name ("" when not a path)


def params_of(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]]


def strip_views(node: ast.AST) -> ast.AST:
    """x for x.reshape(...).contiguous()[...] and the like: the tensor the expression is a view or cast of."""
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in VIEW_METHODS:
            node = node.func.value
        elif isinstance(node, ast.Attribute) and node.attr == "T":
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return node


def assignments(fn: ast.FunctionDef) -> dict[str, list[ast.AST | None]]:
    """name -> every value assigned to it in `fn` (None where the value is not known: loops, unpacking)."""
    out: dict[str, list[ast.AST | None]] = {}

    def bind(target: ast.AST, value: ast.AST | None) -> None:
        if isinstance(target, ast.Name):
            out.setdefault(target.id, []).append(value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
            for i, elt in enumerate(target.elts):
                bind(elt, values[i] if values is not None and len(values) == len(target.elts) else None)

    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                bind(target, node.value)
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            bind(node.target, node.value)
        elif isinstance(node, ast.AugAssign):
            bind(node.target, node)  # the AugAssign itself: a value computed from the old one
        elif isinstance(node, (ast.For, ast.comprehension)):
            bind(node.target, None)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            bind(node.optional_vars, None)
    return out


@dataclass
class FlowContext:
    """What the data-flow rules need to know about the module: its functions, kernels and name resolution."""

    functions: dict[str, ast.FunctionDef]
    jit: set[str]
    qualify: Qualify
    launching: set[str] = field(default_factory=set)  # non-jit functions that launch a kernel, directly or not

    def is_launch(self, call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name):
            return func.value.id in self.jit
        return isinstance(func, ast.Name) and func.id in self.launching


# ---------------------------------------------------------------------- tensors on the host


def tensor_names(fn: ast.FunctionDef, seeds: set[str]) -> set[str]:
    """Names in `fn` that hold tensors: the seeds, parameters used like tensors, and what is derived from them."""
    names = set(seeds)
    params = set(params_of(fn))
    for node in ast.walk(fn):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in params:
            if node.attr in TENSOR_MARKERS:
                names.add(node.value.id)
    assigned = assignments(fn)
    changed = True
    while changed:
        changed = False
        for name, values in assigned.items():
            if name not in names and any(v is not None and is_tensor(v, names) for v in values):
                names.add(name)
                changed = True
    return names


def is_tensor(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Subscript):
        return is_tensor(node.value, names)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in TENSOR_METHODS and is_tensor(node.func.value, names):
            return True
        return isinstance(node.func.value, ast.Name) and node.func.value.id == "torch" and node.func.attr in ALLOCATORS
    if isinstance(node, ast.BinOp):
        return is_tensor(node.left, names) or is_tensor(node.right, names)
    if isinstance(node, ast.UnaryOp):
        return is_tensor(node.operand, names)
    if isinstance(node, ast.AugAssign):
        return is_tensor(node.target, names) or is_tensor(node.value, names)
    return False


def host_compute(fn: ast.FunctionDef, tensors: set[str]) -> Iterator[tuple[ast.AST, str]]:
    """(node, reason) for each tensor operator, comparison or host read of tensor data in `fn`."""
    for node in ast.walk(fn):
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.MatMult):
                yield node, "the @ operator is a matmul outside the kernel"
            elif is_tensor(node.left, tensors) or is_tensor(node.right, tensors):
                yield node, f"{ast.unparse(node)[:60]} is tensor arithmetic outside the kernel"
        elif isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not) and is_tensor(node.operand, tensors):
            yield node, f"{ast.unparse(node)[:60]} is tensor arithmetic outside the kernel"
        elif isinstance(node, ast.AugAssign) and is_tensor(node.target, tensors):
            yield node, f"{ast.unparse(node)[:60]} is tensor arithmetic outside the kernel"
        elif isinstance(node, ast.Compare) and any(is_tensor(x, tensors) for x in [node.left, *node.comparators]):
            yield node, f"{ast.unparse(node)[:60]} compares tensor data outside the kernel"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in HOST_READS:
            if any(is_tensor(a, tensors) for a in node.args):
                yield node, f"{node.func.id}() reads tensor data on the host: a data-dependent path"


# ---------------------------------------------------------------------- where the output comes from


@dataclass(frozen=True)
class Origin:
    kind: str  # "param" | "alloc" | "written" | "constant" | "computed" | "unknown"
    name: str = ""
    node: ast.AST | None = None


def _alias_groups(fn: ast.FunctionDef) -> dict[str, set[str]]:
    """name -> the names that share its buffer through plain assignment or views (a = b.view(...))."""
    groups: dict[str, set[str]] = {}
    for name, values in assignments(fn).items():
        for value in values:
            base = strip_views(value) if value is not None else None
            if isinstance(base, ast.Name):
                merged = groups.get(name, {name}) | groups.get(base.id, {base.id})
                for member in merged:
                    groups[member] = merged
    return groups


def launched_names(fn: ast.FunctionDef, ctx: FlowContext) -> set[str]:
    """Names whose buffer (or a view of it) is an argument of a kernel launch, or of a helper that launches."""
    direct: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and ctx.is_launch(node):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                base = strip_views(arg)
                if isinstance(base, ast.Name):
                    direct.add(base.id)
    groups = _alias_groups(fn)
    out = set(direct)
    for name in direct:
        out |= groups.get(name, set())
    return out


class OutputTracer:
    """Traces each value the entrypoint returns back to a parameter, an allocation, a launch or a computation."""

    def __init__(self, ctx: FlowContext):
        self.ctx = ctx
        self.depth = 0

    def returns(self, fn: ast.FunctionDef) -> list[ast.Return]:
        nested = {id(n) for f in ast.walk(fn) if f is not fn and isinstance(f, (ast.FunctionDef, ast.Lambda))
                  for n in ast.walk(f)}  # fmt: skip
        return [n for n in ast.walk(fn) if isinstance(n, ast.Return) and id(n) not in nested]

    def origins(self, fn: ast.FunctionDef) -> list[Origin]:
        out: list[Origin] = []
        for ret in self.returns(fn):
            if ret.value is None:
                out.append(Origin("constant", node=ret))
            else:
                out.extend(self.trace(fn, ret.value, set()))
        return out

    def trace(self, fn: ast.FunctionDef, expr: ast.AST, seen: set[str]) -> list[Origin]:
        base = strip_views(expr)
        if isinstance(base, ast.IfExp):
            return self.trace(fn, base.body, seen) + self.trace(fn, base.orelse, seen)
        if isinstance(base, (ast.Tuple, ast.List)):
            return [o for elt in base.elts for o in self.trace(fn, elt, seen)]
        if isinstance(base, ast.Constant):
            return [Origin("constant", node=base)]
        if isinstance(base, ast.Name):
            return self._trace_name(fn, base, seen)
        if isinstance(base, ast.Call):
            return self._trace_call(fn, base, seen)
        return [Origin("computed", node=base)]

    def _trace_name(self, fn: ast.FunctionDef, name: ast.Name, seen: set[str]) -> list[Origin]:
        values = assignments(fn).get(name.id)
        if values is None:
            if name.id in params_of(fn):
                return [Origin("param", name.id, name)]
            return [Origin("unknown", name.id, name)]
        if name.id in seen:
            return []
        seen = seen | {name.id}
        out: list[Origin] = []
        written = launched_names(fn, self.ctx)
        for value in values:
            if value is None:
                out.append(Origin("unknown", name.id, name))
                continue
            if isinstance(value, ast.AugAssign):
                out.append(Origin("computed", name.id, value))
                continue
            for origin in self.trace(fn, value, seen):
                if origin.kind == "alloc":
                    held = origin.name or name.id
                    kind = "written" if held in written or name.id in written else "alloc"
                    out.append(Origin(kind, held, origin.node))
                else:
                    out.append(origin)
        return out

    def _trace_call(self, fn: ast.FunctionDef, call: ast.Call, seen: set[str]) -> list[Origin]:
        name = self.ctx.qualify(call.func)
        if name.startswith("torch.") and name.split(".")[-1] in ALLOCATORS:
            return [Origin("alloc", "", call)]
        if isinstance(call.func, ast.Attribute) and call.func.attr in ALLOCATORS:
            return [Origin("alloc", "", call)]  # x.new_empty(...)
        helper = self.ctx.functions.get(name) if isinstance(call.func, ast.Name) else None
        if helper is None or helper.name in self.ctx.jit or self.depth > 4:
            return [Origin("computed", node=call)]
        self.depth += 1
        try:
            out: list[Origin] = []
            params = params_of(helper)
            for origin in self.origins(helper):
                if origin.kind == "param" and origin.name in params:
                    arg = _argument(call, params, origin.name)
                    out.extend(self.trace(fn, arg, seen) if arg is not None else [Origin("unknown")])
                elif origin.kind == "alloc":
                    out.append(Origin("alloc", "", origin.node))  # unwritten inside the helper; maybe written here
                else:
                    out.append(origin)
            return out
        finally:
            self.depth -= 1


def _argument(call: ast.Call, params: list[str], name: str) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    index = params.index(name)
    return call.args[index] if index < len(call.args) else None


def output_findings(entry: ast.FunctionDef, ctx: FlowContext) -> Iterator[tuple[str, ast.AST, str]]:
    """(rule, node, reason) for each way the entrypoint returns something no kernel wrote."""
    for origin in OutputTracer(ctx).origins(entry):
        node = origin.node or entry
        if origin.kind == "param":
            yield "returns-input", node, f"returns its input {origin.name} (or a view or cast of it), not kernel output"
        elif origin.kind == "alloc":
            what = origin.name or ast.unparse(node)[:40]
            yield "output-not-written", node, f"returns {what}, an allocation no kernel launch was given"
        elif origin.kind == "constant":
            yield "output-not-written", node, "returns a constant, not kernel output"
        elif origin.kind == "computed":
            yield "decoy-kernel", node, f"returns {ast.unparse(node)[:50]}, computed outside any kernel"


def stores(kernel: ast.FunctionDef, ctx: FlowContext, seen: set[str] | None = None) -> bool:
    """Whether a jit kernel (or a jit helper it calls) stores to memory."""
    seen = (seen or set()) | {kernel.name}
    for node in ast.walk(kernel):
        if not isinstance(node, ast.Call):
            continue
        name = ctx.qualify(node.func)
        last = name.rsplit(".", 1)[-1]
        if last == "store" or last.startswith("atomic_"):
            return True
        helper = ctx.functions.get(name)
        if helper is not None and helper.name in ctx.jit and helper.name not in seen and stores(helper, ctx, seen):
            return True
    return False
