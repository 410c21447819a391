"""Static checks of untrusted kernel source: AST rules, each finding with a rule id, a reason and a line.

Pure and import-light (ast and the generated protobuf only): the server re-runs it before a swap.
The rules are deliberately strict: a kernel file is kernel → launcher → wrapper and needs nothing
else, so anything outside that shape is refused rather than reasoned about.
"""

from __future__ import annotations

import ast

from services.core.pb import events_pb2 as pb
from services.judge.static_rules import (
    ALLOWED_DECORATORS,
    ALLOWED_IMPORTS,
    FORBIDDEN_CALLS,
    FORBIDDEN_MODULES,
    MAX_SOURCE_CHARS,
    MUTATING_METHODS,
    PATCH_ROOTS,
    RULES,
    SCALAR_MATH_ROOTS,
    TENSOR_OP_METHODS,
    TORCH_COMPUTES_OP,
    TORCH_INTERNALS,
    TRITON_INTERNALS,
)

# Literal values only: no calls, and no arithmetic (10**10**10 at import would hang the server).
_SIMPLE_NODES = (
    ast.Constant, ast.Name, ast.Attribute, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.UnaryOp, ast.unaryop,
    ast.Load,
)  # fmt: skip
# Attribute names suspicious on any object, whatever the chain starts at (a[0].nn.functional ...).
_SUSPECT_ATTRS = {"nn": "torch-computes-op", "functional": "torch-computes-op", "_C": "torch-internals"}
_TRY_NODES = tuple(t for t in (getattr(ast, "Try", None), getattr(ast, "TryStar", None)) if t)


def _simple(node: ast.AST | None) -> bool:
    """A value that is evaluated at import without calling anything."""
    return node is None or all(isinstance(n, _SIMPLE_NODES) for n in ast.walk(node))


def _dotted(node: ast.AST) -> list[str] | None:
    """['a', 'b', 'c'] for a.b.c, None when the chain does not start at a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


class _Checker(ast.NodeVisitor):
    def __init__(self, entrypoint: str | None):
        self.entrypoint = entrypoint
        self.findings: dict[tuple[str, int], str] = {}
        self.aliases: dict[str, str] = {}  # local name -> qualified path it stands for (tl -> triton.language)
        self.modules: set[str] = set()  # names bound to a module by an import
        self.attribute_roots: set[int] = set()  # ids of Name nodes that start an attribute chain
        self.module_names: set[str] = set()  # names assigned at module level
        self.functions: dict[str, ast.FunctionDef] = {}
        self.jit: set[str] = set()
        self.function_stack: list[ast.FunctionDef] = []
        self.local_names: list[set[str]] = []

    def flag(self, rule: str, node: ast.AST, reason: str) -> None:
        self.findings.setdefault((rule, getattr(node, "lineno", 0)), reason)

    # ------------------------------------------------------------------ names and paths

    def qualify(self, parts: list[str]) -> list[str]:
        root = self.aliases.get(parts[0])
        return root.split(".") + parts[1:] if root else parts

    def check_path(self, parts: list[str], node: ast.AST) -> None:
        """Rules on a dotted path as it resolves through the imports (tl.sum -> triton.language.sum)."""
        q = self.qualify(parts)
        text = ".".join(q)
        # A local name (not an import) is checked from its first attribute on.
        hit = next((p for p in (q if parts[0] in self.aliases else q[1:]) if p in FORBIDDEN_MODULES), None)
        if hit:
            self.flag("forbidden-module", node, f"{text} reaches the {hit} module")
        if any(_is_dunder(p) for p in q[1:]):
            self.flag("dunder-access", node, f"{text} reaches a dunder attribute")
        if q[0] == "torch" and len(q) > 1:
            if q[1] in TORCH_COMPUTES_OP:
                self.flag("torch-computes-op", node, f"{text}: torch must not compute the op, the kernel does")
            elif q[1] in TORCH_INTERNALS:
                self.flag("torch-internals", node, f"{text} is a torch internal a kernel has no use for")
        if q[0] == "triton" and len(q) > 1 and q[1] in TRITON_INTERNALS:
            self.flag("torch-internals", node, f"{text} is a triton internal a kernel has no use for")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name):
            self.attribute_roots.add(id(node.value))
        parts = _dotted(node)
        if parts is not None:
            self.check_path(parts, node)
        if _is_dunder(node.attr):
            self.flag("dunder-access", node, f".{node.attr} is a dunder attribute")
        elif node.attr in FORBIDDEN_MODULES:
            self.flag("forbidden-module", node, f".{node.attr} reaches the {node.attr} module")
        elif node.attr in _SUSPECT_ATTRS:
            self.flag(_SUSPECT_ATTRS[node.attr], node, f".{node.attr} reaches torch's own implementation")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if _is_dunder(node.id) and not (isinstance(node.ctx, ast.Store) and node.id == "__all__"):
            self.flag("dunder-access", node, f"{node.id} is a dunder name")
        if not isinstance(node.ctx, ast.Load) or node.id in self._locals():
            return
        if node.id in FORBIDDEN_MODULES:
            self.flag("forbidden-module", node, f"{node.id} names the {node.id} module")
        if node.id in FORBIDDEN_CALLS:
            self.flag("forbidden-call", node, f"{node.id} is not allowed")
        if node.id in self.modules and id(node) not in self.attribute_roots:
            self.flag("module-alias", node, f"the module {node.id} is used other than as module.attribute")
        if node.id in self.aliases:
            self.check_path([node.id], node)

    def _locals(self) -> set[str]:
        return self.local_names[-1] if self.local_names else set()

    # ------------------------------------------------------------------ imports

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name not in ALLOWED_IMPORTS:
                self.flag("import-not-allowed", node, f"import {alias.name} is not allowed")
                continue
            name = alias.asname or alias.name.split(".")[0]
            self.aliases[name] = alias.name if alias.asname else name
            self.modules.add(name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or module not in ALLOWED_IMPORTS:
            self.flag("import-not-allowed", node, f"from {'.' * node.level}{module} import ... is not allowed")
            return
        for alias in node.names:
            if alias.name == "*":
                self.flag("import-not-allowed", node, f"from {module} import * hides what is used")
                continue
            if module == "__future__":
                continue
            qualified = f"{module}.{alias.name}"
            name = alias.asname or alias.name
            self.aliases[name] = qualified
            if qualified in ALLOWED_IMPORTS:
                self.modules.add(name)
            self.check_path([name], node)

    # ------------------------------------------------------------------ module level

    def visit_Module(self, node: ast.Module) -> None:
        for stmt in node.body:  # imports first, so decorators resolve through aliases (import triton as tr)
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.visit(stmt)
        for index, stmt in enumerate(node.body):
            if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef)):
                if isinstance(stmt, ast.FunctionDef):
                    self.functions[stmt.name] = stmt
                    if any(self._decorator_name(d) == "triton.jit" for d in stmt.decorator_list):
                        self.jit.add(stmt.name)
                continue
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and index == 0:
                continue  # the module docstring
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and _simple(stmt.value):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if all(isinstance(t, ast.Name) for t in targets):
                    self.module_names.update(t.id for t in targets)
                    continue
            self.flag("module-statement", stmt, f"module-level {type(stmt).__name__} statement runs at import")
        self.generic_visit(node)

    def _decorator_name(self, node: ast.AST) -> str:
        target = node.func if isinstance(node, ast.Call) else node
        parts = _dotted(target)
        return ".".join(self.qualify(parts)) if parts else ""

    # ------------------------------------------------------------------ functions

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for dec in node.decorator_list:
            name = self._decorator_name(dec)
            if name not in ALLOWED_DECORATORS:
                self.flag("decorator", dec, f"decorator {name or ast.unparse(dec)} is not allowed")
        args = node.args
        for default in [*args.defaults, *args.kw_defaults]:
            if not _simple(default):
                self.flag("default-value", default, f"default {ast.unparse(default)} is not a constant")
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        params |= {a.arg for a in (args.vararg, args.kwarg) if a}
        assigned = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.local_names.append(params | assigned)
        self.function_stack.append(node)
        self.generic_visit(node)
        self.function_stack.pop()
        self.local_names.pop()

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.flag("module-statement", node, "async functions have no place in a kernel file")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.flag("module-statement", node, "class definitions have no place in a kernel file")

    def _in_jit(self) -> bool:
        return any(f.name in self.jit for f in self.function_stack)

    def _in_entrypoint(self) -> bool:
        return bool(self.function_stack) and self.function_stack[0].name == self.entrypoint

    # ------------------------------------------------------------------ statements

    def visit_Global(self, node: ast.Global) -> None:
        self.flag("global-state", node, f"global {', '.join(node.names)} writes module state")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.flag("global-state", node, f"nonlocal {', '.join(node.names)} writes enclosing state")

    def generic_visit(self, node: ast.AST) -> None:
        if _TRY_NODES and isinstance(node, _TRY_NODES):
            self.flag("try-except", node, "try/except can swallow a failing kernel")
        super().generic_visit(node)

    def _check_target(self, target: ast.AST) -> None:
        for node in ast.walk(target):
            if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
                parts = _dotted(node.value if isinstance(node, ast.Subscript) else node)
                if not parts:
                    continue
                q = self.qualify(parts)
                if q[0] in PATCH_ROOTS and (parts[0] in self.aliases or parts[0] in PATCH_ROOTS):
                    self.flag("patches-library", node, f"assigning to {'.'.join(q)} patches a library")
                elif self.function_stack and parts[0] in self.module_names and parts[0] not in self._locals():
                    self.flag("global-state", node, f"writes module-level {parts[0]} from a function")
                elif self._in_entrypoint() and parts[0] in self._entry_params():
                    self.flag("mutates-input", node, f"writes to the entrypoint's input {parts[0]}")

    def _entry_params(self) -> set[str]:
        fn = self.function_stack[0]
        return {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("format", "format_map"):
            if isinstance(func.value, ast.Constant) and "__" in str(func.value.value):
                self.flag("dunder-access", node, "a format string reaching dunder attributes")
        if isinstance(func, ast.Attribute):
            parts = _dotted(func.value)
            root = self.qualify(parts)[0] if parts else ""
            if func.attr in TENSOR_OP_METHODS and not self._in_jit() and root not in SCALAR_MATH_ROOTS:
                self.flag("torch-computes-op", node, f".{func.attr}() computes the op outside the kernel")
            if parts and len(parts) == 1 and self.function_stack:
                name = parts[0]
                if func.attr in MUTATING_METHODS and name in self.module_names and name not in self._locals():
                    self.flag("global-state", node, f"{name}.{func.attr}() mutates module-level state")
                in_place = func.attr.endswith("_") and not func.attr.startswith("_")
                if in_place and self._in_entrypoint() and name in self._entry_params():
                    self.flag("mutates-input", node, f"{name}.{func.attr}() writes to the entrypoint's input")
        self.generic_visit(node)

    # ------------------------------------------------------------------ the kernel is launched

    def launches(self, fn: ast.FunctionDef, seen: set[str]) -> bool:
        """Whether `fn`, or a module-level helper it calls, launches a jit kernel as kernel[grid](...)."""
        seen.add(fn.name)
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Subscript) and isinstance(node.func.value, ast.Name):
                if node.func.value.id in self.jit:
                    return True
            if isinstance(node.func, ast.Name):
                callee = self.functions.get(node.func.id)
                if callee and callee.name not in self.jit and callee.name not in seen and self.launches(callee, seen):
                    return True
        return False

    def check_structure(self, tree: ast.Module) -> None:
        if not self.jit:
            self.flag("no-jit-kernel", tree, "no function is decorated with @triton.jit")
        if self.entrypoint is None:
            entries = [f for name, f in self.functions.items() if name not in self.jit]
        else:
            entry = self.functions.get(self.entrypoint)
            if entry is None or self.entrypoint in self.jit:
                why = "is a @triton.jit kernel" if entry else "is not a top-level function"
                self.flag("entrypoint-missing", tree, f"entrypoint {self.entrypoint!r} {why}")
                return
            entries = [entry]
        if self.jit and not any(self.launches(f, set()) for f in entries):
            who = f"entrypoint {self.entrypoint!r} never launches" if self.entrypoint else "no function launches"
            self.flag("kernel-not-launched", tree, f"{who} a @triton.jit kernel as kernel[grid](...)")


def check_source(source: str, contract: pb.Contract | None = None) -> pb.StaticEvidence:
    """Every rule of RULES applied to `source`; the entrypoint rules use `contract.entrypoint` when given."""
    entrypoint = contract.entrypoint if contract is not None and contract.entrypoint else None
    evidence = pb.StaticEvidence(rules_checked=["syntax"])
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in the source
        line = getattr(exc, "lineno", 0) or 0
        evidence.findings.append(pb.Finding(rule_id="syntax", reason=f"does not parse: {exc}", line=line))
        return evidence
    checker = _Checker(entrypoint)
    if len(source) > MAX_SOURCE_CHARS:
        checker.flag("source-size", tree, f"{len(source)} characters (at most {MAX_SOURCE_CHARS})")
    checker.visit(tree)
    checker.check_structure(tree)
    rules = [r for r in RULES if entrypoint or r != "entrypoint-missing"]
    del evidence.rules_checked[:]
    evidence.rules_checked.extend(rules)
    for (rule, line), reason in sorted(checker.findings.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        evidence.findings.append(pb.Finding(rule_id=rule, reason=reason, line=line))
    evidence.passed = not evidence.findings
    return evidence


def first_finding(evidence: pb.StaticEvidence) -> str:
    """'rule-id: reason (line n)' of the first finding, for reasons and logs."""
    if not evidence.findings:
        return ""
    f = evidence.findings[0]
    return f"{f.rule_id}: {f.reason}" + (f" (line {f.line})" if f.line else "")
