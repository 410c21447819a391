"""Static schema check for a candidate kernel source: only `@triton.jit` kernels, triton imports and literal constants.

A candidate is data: the Python that allocates, launches and returns is ours, so the source may hold no host code.
Under TRITON_INTERPRET=1 a kernel body runs as plain Python, so everything is checked against allowlists (node
types, names, `tl` functions, value attributes) rather than a list of known-bad things: whatever Python or Triton
adds later is refused until someone decides it is harmless. Pure and stdlib-only: the server imports it.

Over 400 lines, one file: the allowlists (node types, names, tl functions, attributes) and the one walk that checks
a source against them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from services.core.pb import events_pb2 as pb

MAX_SOURCE_CHARS = 200_000

RULES: dict[str, str] = {
    "source-size": f"the source is at most {MAX_SOURCE_CHARS} characters",
    "syntax": "the source parses as Python",
    "host-code": "module level holds only a docstring, triton imports, literal constants and @triton.jit kernels",
    "kernel-import": "the only imports are `import triton` and `import triton.language as tl`",
    "kernel-decorator": "a kernel's only decorator is a bare @triton.jit (autotune/heuristics carry host code)",
    "kernel-parameter": "kernel parameters are plain names, annotated tl.constexpr or not, with literal defaults",
    "kernel-construct": "a kernel body uses only assignments, if/for/while, return and plain expressions",
    "kernel-name": "a kernel reads only its parameters, locals, the source's constants and kernels, tl, a few builtins",
    "inline-asm": "no inline assembly, tl.extra or device clocks in a kernel",
    "kernel-attribute": "tl.* is allowlisted and value attributes are a few tensor ones (no handle/data/_private)",
    "kernel-call": "a kernel calls only tl functions, allowed builtins, the source's kernels and tensor methods",
    "no-jit-kernel": "the source defines at least one @triton.jit kernel",
}

BUILTINS = frozenset({"range", "min", "max", "abs", "int", "float", "bool"})

_DTYPES = "float16 bfloat16 float32 float64 int1 int8 int16 int32 int64 uint8 uint16 uint32 uint64"
_TL_FUNCS = """
program_id num_programs arange load store zeros zeros_like full sum max min argmax argmin reduce where
sqrt sqrt_rn rsqrt exp exp2 log log2 abs maximum minimum clamp fma fdiv div_rn sigmoid erf cos sin floor ceil cdiv
static_range range constexpr static_assert device_assert static_print multiple_of max_contiguous max_constancy
dot reshape view broadcast_to broadcast expand_dims trans permute split join interleave cat flip
cumsum cumprod associative_scan xor_sum umulhi cast debug_barrier
"""
_TL_MATH = "rsqrt sqrt sqrt_rn exp exp2 log log2 abs erf cos sin fma floor ceil div_rn fdiv pow max min"
# What a norm/activation/rotary/softmax kernel needs. No atomics (a kernel keeps no state beyond its call), no
# tl.extra (inline asm, device clocks), no random.
TL_ALLOWED = frozenset([f"tl.{n}" for n in (_TL_FUNCS + _DTYPES).split()] + [f"tl.math.{n}" for n in _TL_MATH.split()])

# Attributes on values (parameters, locals, call results). Under the interpreter a pointer argument is a tensor whose
# `.handle.data` is a numpy array: numpy-ish attributes (handle, data, tofile, ctypes, base, ...) reach raw memory and
# the filesystem, so only these tensor attributes pass. Tensor methods such as store/atomic_add are left out too.
VALUE_METHODS = frozenset(
    {"to", "reshape", "broadcast_to", "trans", "permute", "expand_dims", "split", "cast", "sum", "max", "min"}
    | {"argmax", "argmin", "ravel", "view"}  # harmless tensor methods added beyond the brief
)
VALUE_ATTRS = VALUE_METHODS | {"dtype", "element_ty", "shape", "T", "value"}

_ASM = re.compile(r"asm|clock|globaltimer|smid")

# Node types a kernel body may contain; anything else is a kernel-construct finding.
_KERNEL_NODES = (
    ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Pass, ast.Break, ast.Continue,
    ast.If, ast.For, ast.While,
    ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.Call, ast.keyword, ast.Constant,
    ast.Attribute, ast.Subscript, ast.Slice, ast.Name, ast.Tuple, ast.List,  # lists: shapes, tl.zeros([B], ...)
    ast.expr_context, ast.operator, ast.boolop, ast.cmpop, ast.unaryop,
)  # fmt: skip
# Refused nodes whose insides are a scope (or a string) of their own: reported once, not walked into.
_OPAQUE = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.JoinedStr)
_OPAQUE += (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_CONSTRUCTS = {
    "Lambda": "a lambda", "FunctionDef": "a nested def", "AsyncFunctionDef": "a nested async def",
    "ClassDef": "a class", "Global": "a global statement", "Nonlocal": "a nonlocal statement",
    "Import": "an import", "ImportFrom": "an import", "Try": "a try statement", "TryStar": "a try statement",
    "With": "a with statement", "AsyncWith": "a with statement", "AsyncFor": "an async for loop",
    "Yield": "a yield", "YieldFrom": "a yield from", "Await": "an await", "Delete": "a del statement",
    "Raise": "a raise statement", "Assert": "an assert (use tl.static_assert or tl.device_assert)",
    "ListComp": "a comprehension", "SetComp": "a comprehension", "DictComp": "a comprehension",
    "GeneratorExp": "a generator expression", "JoinedStr": "an f-string", "Starred": "a starred expression",
    "NamedExpr": "an assignment expression (:=)", "Match": "a match statement",
    "Set": "a set literal", "Dict": "a dict literal",
}  # fmt: skip


@dataclass(frozen=True)
class KernelSignature:
    name: str
    params: tuple[str, ...]
    constexprs: frozenset[str]
    defaults: frozenset[str]
    line: int


@dataclass(frozen=True)
class KernelSchemaReport:
    findings: tuple[pb.Finding, ...]
    kernels: dict[str, KernelSignature]
    rules_checked: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.findings


def summary(report: KernelSchemaReport) -> str:
    """One line: the first finding in full, then the other rules that fired; "" when passed."""
    if not report.findings:
        return ""
    first, rest = report.findings[0], report.findings[1:]
    text = f"{first.rule_id}: {first.reason} (line {first.line})"
    others = list(dict.fromkeys(f.rule_id for f in rest))
    if others:
        text += "; also " + ", ".join(others)
    return " ".join(text.split())


def check_kernel_source(source: str) -> KernelSchemaReport:
    found = _Findings()
    kernels: dict[str, KernelSignature] = {}
    if len(source) > MAX_SOURCE_CHARS:
        found.add("source-size", f"the source is {len(source)} characters, over the {MAX_SOURCE_CHARS} limit", 1)
        return found.report(kernels)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        line = getattr(exc, "lineno", None) or 0
        found.add(
            "syntax", f"the source does not parse: {getattr(exc, 'msg', None) or str(exc) or type(exc).__name__}", line
        )
        return found.report(kernels)

    constants: set[str] = set()
    plain: set[str] = set()  # `NAME = 4`: allowed at module level, not readable in a kernel
    functions: list[ast.FunctionDef] = []
    for i, stmt in enumerate(tree.body):
        if i == 0 and _is_docstring(stmt):
            continue
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            _check_import(stmt, found)
        elif isinstance(stmt, ast.FunctionDef) and stmt.decorator_list:
            functions.append(stmt)
            if stmt.name in _RESERVED or _is_dunder(stmt.name):
                found.add(
                    "kernel-name", f"a kernel named `{stmt.name}` would shadow a name kernels rely on", stmt.lineno
                )
            if _is_bare_jit(stmt.decorator_list):
                kernels[stmt.name] = _signature(stmt)
            else:
                decs = ", ".join(f"@{_describe_decorator(d)}" for d in stmt.decorator_list)
                found.add(
                    "kernel-decorator",
                    f"`{decs}` on `{stmt.name}`: the only decorator allowed is a bare @triton.jit",
                    stmt.lineno,
                )
        elif isinstance(stmt, ast.FunctionDef):
            found.add(
                "host-code", f"a host function `{stmt.name}`: only @triton.jit kernels may be defined", stmt.lineno
            )
        elif (name := constant_name(stmt)) is not None:
            if name in _RESERVED or _is_dunder(name):
                found.add("host-code", f"a constant named `{name}` would shadow a name kernels rely on", stmt.lineno)
            if _constexpr(stmt):
                constants.add(name)
            else:  # the interpreter reads a plain global; Triton on a GPU refuses to compile a kernel that does
                plain.add(name)
        else:
            found.add("host-code", f"{_describe_host(stmt)} at module level: host code is not allowed", stmt.lineno)

    if not kernels:
        found.add("no-jit-kernel", "the source defines no @triton.jit kernel", 1)
    for fn in functions:
        _check_kernel(fn, constants, set(kernels), found, plain)
    return found.report(kernels)


class _Findings:
    """Findings deduplicated per (rule, line), reported in source order."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, int], str] = {}

    def add(self, rule: str, reason: str, line: int) -> None:
        self._items.setdefault((rule, line), reason)

    def report(self, kernels: dict[str, KernelSignature]) -> KernelSchemaReport:
        # Stable sort by line (first found first within a line); "no kernel at all" is about the whole source: last.
        ordered = sorted(self._items.items(), key=lambda item: (item[0][0] == "no-jit-kernel", item[0][1]))
        findings = tuple(pb.Finding(rule_id=rule, reason=reason, line=line) for (rule, line), reason in ordered)
        return KernelSchemaReport(findings=findings, kernels=kernels, rules_checked=tuple(RULES))


# Names a kernel must be able to trust: rebinding one (as a constant, parameter or local) would let a call through
# `range(...)` or an attribute through `tl.` reach something else.
_RESERVED = BUILTINS | {"tl", "triton"}


# ---- module level ----------------------------------------------------------------------------------------------


def dotted(node: ast.AST) -> str | None:
    """'a.b.c' for a.b.c, None when the chain does not start at a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _check_import(stmt: ast.Import | ast.ImportFrom, found: _Findings) -> None:
    if isinstance(stmt, ast.ImportFrom):
        names = [(a.name, a.asname) for a in stmt.names]
        if stmt.module == "__future__" and stmt.level == 0 and names == [("annotations", None)]:
            return
        what = f"from {'.' * stmt.level}{stmt.module or ''} import {', '.join(n for n, _ in names)}"
        found.add("kernel-import", f"`{what}`: only triton and triton.language as tl may be imported", stmt.lineno)
        return
    for alias in stmt.names:
        if (alias.name, alias.asname) not in {("triton", None), ("triton.language", "tl")}:
            what = f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
            found.add("kernel-import", f"`{what}`: only triton and triton.language as tl may be imported", stmt.lineno)


def _is_number(node: ast.AST | None) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float, bool)


def constant_name(stmt: ast.stmt) -> str | None:
    """The name of `NAME = 4`, `NAME: tl.constexpr = 4` or `NAME = tl.constexpr(4)`; None for anything else."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target, value = stmt.targets[0], stmt.value
    elif isinstance(stmt, ast.AnnAssign) and dotted(stmt.annotation) == "tl.constexpr":
        target, value = stmt.target, stmt.value
    else:
        return None
    if isinstance(value, ast.Call) and dotted(value.func) == "tl.constexpr" and not value.keywords:
        value = value.args[0] if len(value.args) == 1 else None
    return target.id if isinstance(target, ast.Name) and _is_number(value) else None


def _constexpr(stmt: ast.stmt) -> bool:
    """Whether a constant is a tl.constexpr instance (`NAME = tl.constexpr(4)`), the one global Triton's compiler
    lets a kernel read (an annotation, `NAME: tl.constexpr = 4`, is not one: its code generator says so)."""
    return isinstance(stmt.value, ast.Call) and dotted(stmt.value.func) == "tl.constexpr"


def _describe_host(stmt: ast.stmt) -> str:
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        callee = dotted(stmt.value.func)
        return f"a call to `{callee}`" if callee else "a call"
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if len(targets) > 1:
            return "a chained assignment"
        if not isinstance(targets[0], ast.Name):
            return "an assignment to a tuple or attribute target"
        return f"an assignment to `{targets[0].id}` of something other than an int/float/bool literal"
    if isinstance(stmt, (ast.ClassDef, ast.AsyncFunctionDef)):
        return f"{'a class' if isinstance(stmt, ast.ClassDef) else 'an async function'} `{stmt.name}`"
    kinds = {ast.If: "an if statement", ast.For: "a for loop", ast.While: "a while loop", ast.With: "a with statement"}
    for kind, text in kinds.items():
        if isinstance(stmt, kind):
            return text
    if isinstance(stmt, ast.Expr):
        return "an expression statement"
    return _CONSTRUCTS.get(type(stmt).__name__, "a statement")


def _is_bare_jit(decorators: list[ast.expr]) -> bool:
    return len(decorators) == 1 and isinstance(decorators[0], ast.Attribute) and dotted(decorators[0]) == "triton.jit"


def _describe_decorator(dec: ast.expr) -> str:
    if isinstance(dec, ast.Call):
        return f"{dotted(dec.func) or '...'}(...)"
    return dotted(dec) or "..."


def _signature(fn: ast.FunctionDef) -> KernelSignature:
    a = fn.args
    positional = a.posonlyargs + a.args
    params = positional + a.kwonlyargs
    with_default = positional[len(positional) - len(a.defaults) :] + [
        p for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None
    ]
    return KernelSignature(
        name=fn.name,
        params=tuple(p.arg for p in params),
        constexprs=frozenset(p.arg for p in params if p.annotation and dotted(p.annotation) == "tl.constexpr"),
        defaults=frozenset(p.arg for p in with_default),
        line=fn.lineno,
    )


# ---- kernels ---------------------------------------------------------------------------------------------------


def _check_parameters(fn: ast.FunctionDef, found: _Findings) -> None:
    a, k = fn.args, f"kernel `{fn.name}`"
    if a.vararg or a.kwarg:
        found.add("kernel-parameter", f"{k} takes *args/**kwargs: parameters must be plain names", fn.lineno)
    if a.posonlyargs or a.kwonlyargs:
        found.add("kernel-parameter", f"{k} has positional-only or keyword-only parameters", fn.lineno)
    if fn.returns is not None:
        found.add("kernel-parameter", f"{k} has a return annotation (evaluated on the host)", fn.lineno)
    for p in a.posonlyargs + a.args + a.kwonlyargs:
        if _is_dunder(p.arg) or p.arg in _RESERVED:
            found.add("kernel-parameter", f"{k} has a parameter named `{p.arg}`", p.lineno)
        if p.annotation is not None and dotted(p.annotation) != "tl.constexpr":
            found.add(
                "kernel-parameter", f"parameter `{p.arg}` of {k}: the only annotation allowed is tl.constexpr", p.lineno
            )
    for d in a.defaults + [d for d in a.kw_defaults if d is not None]:
        if not (_is_number(d) or (isinstance(d, ast.Constant) and d.value is None)):
            found.add("kernel-parameter", f"{k} has a default that is not an int/float/bool/None literal", d.lineno)


def _walk_body(fn: ast.FunctionDef):
    """Every node of the kernel body, not descending into nested scopes (they are refused whole)."""
    stack = list(reversed(fn.body))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _OPAQUE):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _attribute_problem(node: ast.Attribute, inner: set[int]) -> tuple[str, str] | None:
    """(rule, reason) for a refused attribute, None when it passes."""
    chain = dotted(node)
    rooted_at_tl = chain is not None and chain.split(".")[0] == "tl"
    if rooted_at_tl and id(node) in inner:
        return None  # tl.math in tl.math.rsqrt: the full chain is checked at its outermost node
    names = chain.split(".")[1:] if rooted_at_tl else [node.attr]
    if any(_ASM.search(n) for n in names) or (rooted_at_tl and names[0] == "extra"):
        return "inline-asm", f"`{chain or node.attr}`: inline assembly or device clocks in a kernel"
    if any(n.startswith("_") for n in names):
        return "kernel-attribute", f"attribute `{node.attr}`: private attributes reach interpreter internals"
    if rooted_at_tl and chain not in TL_ALLOWED:
        return "kernel-attribute", f"`{chain}` is not in the allowlist of tl functions and dtypes"
    if not rooted_at_tl and node.attr not in VALUE_ATTRS:
        return "kernel-attribute", f"attribute `.{node.attr}` on a value: only a few tensor attributes are allowed"
    return None


def _check_kernel(
    fn: ast.FunctionDef, constants: set[str], kernels: set[str], found: _Findings, plain: set[str]
) -> None:
    _check_parameters(fn, found)
    params = {p.arg for p in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    nodes = list(_walk_body(fn))
    local_names = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    known = params | local_names | constants | kernels | (_RESERVED - {"triton"})
    inner = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}
    attr_problems = {id(n): p for n in nodes if isinstance(n, ast.Attribute) and (p := _attribute_problem(n, inner))}
    k = f"in kernel `{fn.name}`"

    for node in nodes:
        line = getattr(node, "lineno", fn.lineno)
        if not isinstance(node, _KERNEL_NODES):
            if not isinstance(node, (ast.stmt, ast.expr)):
                continue  # an except clause, with item or match pattern: its statement is reported
            what = _CONSTRUCTS.get(type(node).__name__, f"a `{type(node).__name__}` node")
            found.add("kernel-construct", f"{what} {k}: kernel bodies allow only plain Triton code", line)
        elif isinstance(node, ast.keyword) and node.arg is None:
            found.add("kernel-construct", f"`**` unpacking in a call {k}", line)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            found.add("kernel-construct", f"an assignment to a subscript {k}", line)
        elif isinstance(node, ast.Attribute):
            if isinstance(node.ctx, ast.Store):
                found.add("kernel-attribute", f"an assignment to attribute `.{node.attr}` {k}", line)
            elif id(node) in attr_problems:
                found.add(*attr_problems[id(node)], line)
        elif isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store) and (node.id in _RESERVED | kernels or _is_dunder(node.id)):
                found.add("kernel-name", f"`{node.id}` is rebound {k}: kernels must be able to trust it", line)
            elif not isinstance(node.ctx, ast.Store) and node.id in plain and node.id not in params | local_names:
                found.add(
                    "kernel-name",
                    f"`{node.id}` {k} is a plain constant: Triton on a GPU compiles a kernel that reads a global only "
                    f"as a tl.constexpr instance (`{node.id} = tl.constexpr(...)`); the interpreter would run it",
                    line,
                )
            elif not isinstance(node.ctx, ast.Store) and (node.id not in known or _is_dunder(node.id)):
                found.add(
                    "kernel-name",
                    f"name `{node.id}` {k} is not a parameter, local, constant, kernel, tl or allowed builtin",
                    line,
                )
        elif isinstance(node, ast.Call):
            reason = _callee_problem(node.func, params | local_names | constants, kernels, attr_problems)
            if reason:
                found.add(
                    "kernel-call",
                    f"{reason} {k}; a kernel calls only tl functions, builtins, kernels, tensor methods",
                    line,
                )


def _callee_problem(func: ast.expr, values: set[str], kernels: set[str], attr_problems: dict) -> str | None:
    """Why this callee is refused; None when it passes or another rule already reports it."""
    if isinstance(func, ast.Name):
        if func.id in BUILTINS or func.id in kernels:
            return None
        if func.id == "tl" or func.id in values:
            return f"calls `{func.id}`, a parameter, local or constant"
        return None  # an unknown name: kernel-name reports it
    if isinstance(func, ast.Attribute):
        if id(func) in attr_problems or (dotted(func) or "").startswith("tl."):
            return None  # refused by kernel-attribute / inline-asm, or an allowlisted tl function
        return None if func.attr in VALUE_METHODS else f"calls `.{func.attr}`, which is not a tensor method"
    kind = {ast.Subscript: "a subscript", ast.Call: "a call result"}.get(type(func), "an expression")
    return f"calls {kind}"
