"""Small AST helpers shared by the static check's rules (pure, stdlib only)."""

from __future__ import annotations

import ast

# Literal values only: no calls, and no arithmetic (10**10**10 at import would hang the server).
_SIMPLE_NODES = (
    ast.Constant, ast.Name, ast.Attribute, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.UnaryOp, ast.unaryop,
    ast.Load,
)  # fmt: skip
_MUTABLE_NODES = (ast.List, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp)


def simple(node: ast.AST | None) -> bool:
    """A value that is evaluated at import without calling anything."""
    return node is None or all(isinstance(n, _SIMPLE_NODES) for n in ast.walk(node))


def mutable(node: ast.AST | None) -> bool:
    return node is not None and any(isinstance(n, _MUTABLE_NODES) for n in ast.walk(node))


def dotted(node: ast.AST) -> list[str] | None:
    """['a', 'b', 'c'] for a.b.c, None when the chain does not start at a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def root_name(node: ast.AST) -> str | None:
    """The plain name an attribute/subscript/call chain starts at (a for a.b[0].c())."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def docstrings(tree: ast.Module) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out
