"""Structural rules of the static check: a jit kernel exists, the entrypoint launches it, every launched
kernel stores, and what the entrypoint returns is what a kernel wrote (with services.judge.static_flow).

Functions of the checker (services.judge.static_check._Checker), which supplies the module's
functions, its jit kernels, name resolution and `flag`.
"""

from __future__ import annotations

import ast
from typing import Protocol

from services.judge.static_flow import FlowContext, host_compute, output_findings, stores, tensor_names


class Checker(Protocol):
    entrypoint: str | None
    tensor_params: set[str]
    functions: dict[str, ast.FunctionDef]
    jit: set[str]

    def flag(self, rule: str, node: ast.AST, reason: str) -> None: ...

    def qualified(self, node: ast.AST) -> str: ...


def flow(self: Checker) -> FlowContext:
    ctx = FlowContext(self.functions, self.jit, self.qualified)
    ctx.launching = {name for name, f in self.functions.items() if name not in self.jit and launches(self, f, set())}
    return ctx


def launches(self: Checker, fn: ast.FunctionDef, seen: set[str]) -> bool:
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
            if callee and callee.name not in self.jit and callee.name not in seen and launches(self, callee, seen):
                return True
    return False


def check_structure(self: Checker, tree: ast.Module) -> None:
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
    if self.jit and not any(launches(self, f, set()) for f in entries):
        who = f"entrypoint {self.entrypoint!r} never launches" if self.entrypoint else "no function launches"
        self.flag("kernel-not-launched", tree, f"{who} a @triton.jit kernel as kernel[grid](...)")
    ctx = flow(self)
    check_kernels_used(self, ctx)
    for name, fn in self.functions.items():
        if name in self.jit:
            continue
        seeds = self.tensor_params if name == self.entrypoint else set()
        for node, reason in host_compute(fn, tensor_names(fn, seeds)):
            self.flag("host-arithmetic", node, reason)
    if self.entrypoint is not None:
        for rule, node, reason in output_findings(entries[0], ctx):
            self.flag(rule, node, reason)


def check_kernels_used(self: Checker, ctx: FlowContext) -> None:
    launched: set[str] = set()
    called_from_jit: set[str] = set()
    for name, fn in self.functions.items():
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Subscript) and isinstance(node.func.value, ast.Name):
                launched.add(node.func.value.id)
            elif isinstance(node.func, ast.Name) and name in self.jit:
                called_from_jit.add(node.func.id)
    for name in sorted(self.jit):
        fn = self.functions[name]
        if name in launched and not stores(fn, ctx):
            self.flag("decoy-kernel", fn, f"kernel {name} is launched but never stores: it cannot write the output")
        elif name not in launched and name not in called_from_jit:
            self.flag("decoy-kernel", fn, f"kernel {name} is defined but never launched")
