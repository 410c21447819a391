"""Patching a judged kernel into every live instance of a module class, and taking it out again exactly.

A swap is all or nothing: either every instance of the target class serves the kernel, or none does.
The patch is an instance attribute `forward` (a bound method), so `nn.Module.__call__` and its hooks
keep working and reverting is deleting (or restoring) that one attribute.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from services.core.pb import events_pb2 as pb
from services.server.introspection import class_path, instances_of

SUPPORTED_KINDS = ("module_class",)
_CASTS = {"float": float, "int": int}
_MISSING = object()


class SwapRefused(RuntimeError):
    """The contract cannot be applied to the served model (no instance matches, unsupported kind, ...)."""


@dataclass
class _Patched:
    module: torch.nn.Module
    previous: object  # the instance's own `forward` before the swap, or _MISSING when it had none


@dataclass
class SwapHandle:
    target: str
    patched: list[_Patched] = field(default_factory=list)
    reverted: bool = False

    @property
    def modules(self) -> list[torch.nn.Module]:
        return [p.module for p in self.patched]

    def revert(self) -> None:
        """Restore exactly what each instance had: its own `forward` attribute, or none at all."""
        if self.reverted:
            return
        for p in reversed(self.patched):
            if p.previous is _MISSING:
                p.module.__dict__.pop("forward", None)
            else:
                p.module.__dict__["forward"] = p.previous
        self.reverted = True


def kernel_forward(entry: Callable, contract: pb.Contract) -> Callable:
    """forward(self, *inputs) calling `entry` with the contract's inputs and the bindings read from `self`.

    Like services.core.kernels.bound_forward, but unbound (one function for every instance) and strict:
    an argument the contract does not name is an error, never silently dropped, so parity on recorded
    live calls catches a contract that does not fit how the model calls the module.
    """
    inputs = list(contract.inputs)
    bindings = [(b.param, b.attr, _CASTS.get(b.kind)) for b in contract.bindings]
    target = contract.target

    def forward(self, *args, **kwargs):
        if len(args) > len(inputs):
            raise TypeError(f"patched {target}.forward takes {len(inputs)} inputs {inputs}, got {len(args)}")
        call = dict(zip(inputs, args, strict=False))
        for name, value in kwargs.items():
            if name not in inputs or name in call:
                raise TypeError(f"patched {target}.forward got an unexpected argument {name!r}")
            call[name] = value
        for param, attr, cast in bindings:
            value = getattr(self, attr)
            call[param] = cast(value) if cast else value
        return entry(**call)

    forward.__name__ = f"kernel_forward[{getattr(entry, '__name__', 'entry')}]"
    return forward


def apply_swap(model: torch.nn.Module, contract: pb.Contract, entry: Callable) -> SwapHandle:
    """Patch every instance whose exact class is `contract.target`; SwapRefused when none can be patched."""
    kind = contract.kind or "module_class"
    if kind not in SUPPORTED_KINDS:
        raise SwapRefused(f"contract kind {kind!r} is not served yet (supported: {', '.join(SUPPORTED_KINDS)})")
    if not contract.target:
        raise SwapRefused("the contract names no target class")
    instances = instances_of(model, contract.target)
    if not instances:
        present = sorted({class_path(m) for m in model.modules()})
        raise SwapRefused(
            f"no module of class {contract.target} in the served model; its classes are: {', '.join(present)}"
        )
    for b in contract.bindings:
        if not hasattr(instances[0], b.attr):
            raise SwapRefused(f"{contract.target} has no attribute {b.attr!r} that the contract binds to {b.param!r}")
    fn = kernel_forward(entry, contract)
    handle = SwapHandle(contract.target)
    try:
        for module in instances:
            handle.patched.append(_Patched(module, module.__dict__.get("forward", _MISSING)))
            module.__dict__["forward"] = types.MethodType(fn, module)
    except BaseException:
        handle.revert()
        raise
    return handle


def is_patched(module: torch.nn.Module) -> bool:
    return "forward" in module.__dict__
