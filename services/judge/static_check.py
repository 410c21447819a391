"""Static checks of untrusted kernel source: AST rules, each finding with a rule id, a reason and a line.

Pure and import-light (ast and the generated protobuf only): the server re-runs it before a swap.
The rules are deliberately strict: a kernel file is kernel → launcher → wrapper and needs nothing
else, so anything outside that shape is refused rather than reasoned about. This module holds the
visitor (names, imports, calls, statements); the structural rules (a kernel launched, stores,
what is returned) are in static_structure, the data flow they use in static_flow, and the allow
and deny lists in static_rules.
"""

from __future__ import annotations

import ast

from services.core.pb import events_pb2 as pb
from services.judge.static_ast import docstrings, dotted, is_dunder, mutable, root_name, simple
from services.judge.static_flow import params_of
from services.judge.static_rules import (
    ALLOWED_BUILTINS,
    ALLOWED_DECORATORS,
    ALLOWED_IMPORTS,
    ALLOWED_METHODS,
    DECORATOR_HOOKS,
    FORBIDDEN_CALLS,
    FORBIDDEN_MODULES,
    MAX_SOURCE_CHARS,
    MUTATING_METHODS,
    PATCH_ROOTS,
    RULES,
    SCALAR_MATH_ROOTS,
    STREAM_KEYWORDS,
    SUBCLASS_METHODS,
    SUSPECT_PATHS,
    TENSOR_OP_METHODS,
    TORCH_ALLOWED,
    TORCH_COMPUTES_OP,
    TORCH_INTERNALS,
    TORCH_STREAMS,
    TRITON_ESCAPES,
    TRITON_INTERNALS,
)
from services.judge.static_structure import check_structure

# Attribute names suspicious on any object, whatever the chain starts at (a[0].nn.functional ...).
_SUSPECT_ATTRS = {"nn": "torch-computes-op", "functional": "torch-computes-op", "_C": "torch-internals"}
_TRY_NODES = tuple(t for t in (getattr(ast, "Try", None), getattr(ast, "TryStar", None)) if t)
_LIBRARIES = frozenset({"torch", "triton", "math", "typing"})
# Rules that conclude from the whole file's structure and data flow (reported after the direct ones).
_CONCLUSIONS = frozenset(
    {
        "no-jit-kernel",
        "kernel-not-launched",
        "decoy-kernel",
        "returns-input",
        "output-not-written",
        "entrypoint-missing",
    }
)


class _Checker(ast.NodeVisitor):
    def __init__(self, entrypoint: str | None, tensor_params: set[str]):
        self.entrypoint = entrypoint
        self.tensor_params = tensor_params
        self.findings: dict[tuple[str, int], str] = {}
        self.aliases: dict[str, str] = {}  # local name -> qualified path it stands for (tl -> triton.language)
        self.modules: set[str] = set()  # names bound to a module by an import
        self.attribute_roots: set[int] = set()  # ids of Name nodes that start an attribute chain
        self.module_names: set[str] = set()  # names assigned at module level
        self.functions: dict[str, ast.FunctionDef] = {}
        self.jit: set[str] = set()
        self.function_stack: list[ast.FunctionDef] = []
        self.local_names: list[set[str]] = []
        self.nested_functions: list[set[str]] = []
        self.docstrings: set[int] = set()

    def flag(self, rule: str, node: ast.AST, reason: str) -> None:
        self.findings.setdefault((rule, getattr(node, "lineno", 0)), reason)

    # ------------------------------------------------------------------ names and paths

    def qualify(self, parts: list[str]) -> list[str]:
        root = self.aliases.get(parts[0])
        return root.split(".") + parts[1:] if root else parts

    def qualified(self, node: ast.AST) -> str:
        parts = dotted(node)
        return ".".join(self.qualify(parts)) if parts else ""

    def check_path(self, parts: list[str], node: ast.AST) -> None:
        """Rules on a dotted path as it resolves through the imports (tl.sum -> triton.language.sum)."""
        q = self.qualify(parts)
        text = ".".join(q)
        imported = parts[0] in self.aliases
        # A local name (not an import) is checked from its first attribute on.
        hit = next((p for p in (q if imported else q[1:]) if p in FORBIDDEN_MODULES), None)
        if hit:
            self.flag("forbidden-module", node, f"{text} reaches the {hit} module")
        if any(is_dunder(p) for p in q[1:]):
            self.flag("dunder-access", node, f"{text} reaches a dunder attribute")
        if not imported or q[0] not in _LIBRARIES or len(q) < 2:
            return
        if any(p.startswith("_") and not is_dunder(p) for p in q[1:]):
            self.flag("torch-internals", node, f"{text} reaches a private name of {q[0]}")
        if q[0] == "torch":
            self._check_torch(q, text, node)
        elif q[0] == "triton":
            if q[1] in TRITON_INTERNALS:
                self.flag("torch-internals", node, f"{text} is a triton internal a kernel has no use for")
            if any(p in TRITON_ESCAPES for p in q[1:]):
                self.flag("inline-asm", node, f"{text} reads clocks or runs raw assembly")

    def _check_torch(self, q: list[str], text: str, node: ast.AST) -> None:
        if q[1] in TORCH_COMPUTES_OP:
            self.flag("torch-computes-op", node, f"{text}: torch must not compute the op, the kernel does")
        elif q[1] in TORCH_INTERNALS:
            self.flag("torch-internals", node, f"{text} is a torch internal a kernel has no use for")
        elif q[1] in TORCH_STREAMS:
            self.flag("stream-trick", node, f"{text}: streams, events and synchronisation are the judge's")
        elif q[1] not in TORCH_ALLOWED:
            self.flag("torch-not-allowed", node, f"{text} is not allocation, a dtype or type promotion")
        elif q[1] == "Tensor" and len(q) > 2:
            if q[2] in SUBCLASS_METHODS:
                self.flag("tensor-subclass", node, f"{text} builds a tensor subclass")
            else:
                self.flag("torch-not-allowed", node, f"{text}: methods are called on tensors, not through the class")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name):
            self.attribute_roots.add(id(node.value))
        parts = dotted(node)
        if parts is not None:
            self.check_path(parts, node)
            if parts[0] in self.functions and parts[0] not in self._locals():
                self.flag("global-state", node, f"{'.'.join(parts)} reaches into a function object")
        if is_dunder(node.attr):
            self.flag("dunder-access", node, f".{node.attr} is a dunder attribute")
        elif node.attr in FORBIDDEN_MODULES:
            self.flag("forbidden-module", node, f".{node.attr} reaches the {node.attr} module")
        elif node.attr in _SUSPECT_ATTRS:
            self.flag(_SUSPECT_ATTRS[node.attr], node, f".{node.attr} reaches torch's own implementation")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if is_dunder(node.id) and not (isinstance(node.ctx, ast.Store) and node.id == "__all__"):
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

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and id(node) not in self.docstrings:
            hit = next((p for p in SUSPECT_PATHS if p in node.value), None)
            if hit:
                self.flag("judge-files", node, f"the string {node.value[:40]!r} names {hit!r}")

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
        self.docstrings = docstrings(node)
        for stmt in node.body:  # imports first, so decorators resolve through aliases (import triton as tr)
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.visit(stmt)
            elif isinstance(stmt, ast.FunctionDef):
                self.functions[stmt.name] = stmt
                if any(self._decorator_name(d) == "triton.jit" for d in stmt.decorator_list):
                    self.jit.add(stmt.name)
        for index, stmt in enumerate(node.body):
            if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef)):
                continue
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and index == 0:
                continue  # the module docstring
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and simple(stmt.value):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if all(isinstance(t, ast.Name) for t in targets):
                    self.module_names.update(t.id for t in targets)
                    if mutable(stmt.value):
                        self.flag("global-state", stmt, "a module-level list/dict/set is state that outlives a call")
                    continue
            self.flag("module-statement", stmt, f"module-level {type(stmt).__name__} statement runs at import")
        for stmt in node.body:
            if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.visit(stmt)

    def _decorator_name(self, node: ast.AST) -> str:
        target = node.func if isinstance(node, ast.Call) else node
        parts = dotted(target)
        return ".".join(self.qualify(parts)) if parts else ""

    # ------------------------------------------------------------------ functions

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for dec in node.decorator_list:
            name = self._decorator_name(dec)
            if name not in ALLOWED_DECORATORS:
                self.flag("decorator", dec, f"decorator {name or ast.unparse(dec)} is not allowed")
            for kw in dec.keywords if isinstance(dec, ast.Call) else []:
                if kw.arg in DECORATOR_HOOKS:
                    self.flag("decorator", dec, f"{name}({kw.arg}=...) runs the candidate's code around the kernel")
        args = node.args
        for default in [*args.defaults, *args.kw_defaults]:
            if not simple(default):
                self.flag("default-value", default, f"default {ast.unparse(default)} is not a constant")
            elif mutable(default):
                self.flag("default-value", default, f"default {ast.unparse(default)[:30]} is mutable: a cache")
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        params |= {a.arg for a in (args.vararg, args.kwarg) if a}
        assigned = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        nested = {n.name for n in ast.walk(node) if isinstance(n, ast.FunctionDef) and n is not node}
        self.local_names.append(params | assigned | nested)
        self.nested_functions.append(nested)
        self.function_stack.append(node)
        self.generic_visit(node)
        self.function_stack.pop()
        self.nested_functions.pop()
        self.local_names.pop()

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.flag("module-statement", node, "async functions have no place in a kernel file")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.flag("module-statement", node, "class definitions have no place in a kernel file")
        for base in node.bases:
            if "Tensor" in self.qualified(base) or "Tensor" in ast.unparse(base):
                self.flag("tensor-subclass", node, f"class {node.name}({ast.unparse(base)}) is a tensor subclass")
        self.generic_visit(node)

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
            self.flag("try-except", node, "try/except can swallow a failing kernel and fall back")
        super().generic_visit(node)

    def _check_target(self, target: ast.AST) -> None:
        for node in ast.walk(target):
            if not (isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del))):
                continue
            root = root_name(node)
            if root is None:
                continue
            q = self.qualify([root])
            text = ast.unparse(node)[:50]
            if q[0] in PATCH_ROOTS and (root in self.aliases or root in PATCH_ROOTS):
                self.flag("patches-library", node, f"assigning to {text} patches a library")
            elif root in (self.module_names | set(self.functions)) and root not in self._locals():
                self.flag("global-state", node, f"writes module-level {root} from a function")
            elif self._in_entrypoint() and root in self._entry_params():
                self.flag("mutates-input", node, f"writes to the entrypoint's input {root}")
            elif isinstance(node, ast.Attribute) and not self._in_jit():
                self.flag("global-state", node, f"assigning {text} attaches state to an object that outlives the call")

    def _entry_params(self) -> set[str]:
        return set(params_of(self.function_stack[0]))

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
        for kw in node.keywords:
            if kw.arg in STREAM_KEYWORDS:
                self.flag("stream-trick", node, f"{kw.arg}= asks for work the timing would not wait for")
        if isinstance(func, ast.Name):
            self._check_name_call(func, node)
        elif isinstance(func, ast.Attribute):
            self._check_method_call(func, node)
        self.generic_visit(node)

    def _check_name_call(self, func: ast.Name, node: ast.Call) -> None:
        name = func.id
        if name in self.functions or name in self.aliases or name in FORBIDDEN_CALLS:
            return  # module functions; imported names (their path is checked); forbidden ones flagged by name
        if self.nested_functions and name in self.nested_functions[-1]:
            return
        if name in self._locals():
            self.flag("forbidden-call", node, f"calls {name}, a variable: only named functions may be called")
        elif name not in ALLOWED_BUILTINS:
            self.flag("forbidden-call", node, f"{name}() is not a builtin a kernel file may call")

    def _check_method_call(self, func: ast.Attribute, node: ast.Call) -> None:
        if func.attr in ("format", "format_map"):
            if isinstance(func.value, ast.Constant) and "__" in str(func.value.value):
                self.flag("dunder-access", node, "a format string reaching dunder attributes")
        parts = dotted(func.value)
        root = root_name(func.value)
        qualified_root = self.qualify([root])[0] if root else ""
        if root and root in self.aliases:  # a module path: its own rules apply (torch.X, triton.X)
            if func.attr in MUTATING_METHODS and qualified_root in _LIBRARIES | PATCH_ROOTS:
                self.flag("patches-library", node, f"{ast.unparse(func)[:50]}() mutates a library's state")
            return
        if func.attr in SUBCLASS_METHODS:
            self.flag("tensor-subclass", node, f".{func.attr}() wraps a tensor in a subclass")
        if self.function_stack and root and root not in self._locals():
            if func.attr in MUTATING_METHODS and (root in self.module_names or root in self.functions):
                self.flag("global-state", node, f"{ast.unparse(func)[:50]}() mutates module-level state")
        if self._in_entrypoint() and root in self._entry_params():
            if func.attr.endswith("_") and not func.attr.startswith("_"):
                self.flag("mutates-input", node, f"{ast.unparse(func)[:50]}() writes to the entrypoint's input")
        if self._in_jit() or qualified_root in SCALAR_MATH_ROOTS or isinstance(func.value, ast.Constant):
            return
        if func.attr in TENSOR_OP_METHODS:
            self.flag("torch-computes-op", node, f".{func.attr}() computes the op outside the kernel")
        elif func.attr not in ALLOWED_METHODS and func.attr not in SUBCLASS_METHODS and parts != ["self"]:
            self.flag("method-not-allowed", node, f".{func.attr}() is not a shape or layout method")


def check_source(source: str, contract: pb.Contract | None = None) -> pb.StaticEvidence:
    """Every rule of RULES applied to `source`; the entrypoint rules use `contract.entrypoint` when given."""
    entrypoint = contract.entrypoint if contract is not None and contract.entrypoint else None
    # The forward's inputs are tensors; bound parameters count as tensors where the source uses them so
    # (the contract's declared kinds are the candidate's claim, checked by the contract layer).
    tensor_params = set(contract.inputs) if contract is not None else set()
    evidence = pb.StaticEvidence(rules_checked=["syntax"])
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in the source
        line = getattr(exc, "lineno", 0) or 0
        evidence.findings.append(pb.Finding(rule_id="syntax", reason=f"does not parse: {exc}", line=line))
        return evidence
    checker = _Checker(entrypoint, tensor_params)
    if len(source) > MAX_SOURCE_CHARS:
        checker.flag("source-size", tree, f"{len(source)} characters (at most {MAX_SOURCE_CHARS})")
    checker.visit(tree)
    check_structure(checker, tree)
    rules = [r for r in RULES if entrypoint or r not in ("entrypoint-missing",)]
    del evidence.rules_checked[:]
    evidence.rules_checked.extend(rules)
    # Direct findings first (they say what the code does), then what the data flow concluded from it.
    order = sorted(checker.findings.items(), key=lambda kv: (kv[0][0] in _CONCLUSIONS, kv[0][1], kv[0][0]))
    for (rule, line), reason in order:
        evidence.findings.append(pb.Finding(rule_id=rule, reason=reason, line=line))
    evidence.passed = not evidence.findings
    return evidence


def first_finding(evidence: pb.StaticEvidence) -> str:
    """'rule-id: reason (line n)' of the first finding, for reasons and logs."""
    if not evidence.findings:
        return ""
    f = evidence.findings[0]
    return f"{f.rule_id}: {f.reason}" + (f" (line {f.line})" if f.line else "")


def finding_summary(evidence: pb.StaticEvidence) -> str:
    """The first finding in full, then the other rules that fired: what a verdict says of a static failure."""
    first = first_finding(evidence)
    others = sorted({f.rule_id for f in evidence.findings[1:]} - {evidence.findings[0].rule_id}) if first else []
    return first + (f"; also {', '.join(others)}" if others else "")
