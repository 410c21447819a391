"""Module-level functions of a served model's modeling files, as targets: found, recorded, swapped.

The attention of an HF model calls `apply_rotary_pos_emb` by its global name in the modeling file on every
call, so replacing that global swaps the op for every layer at once, and putting the original back reverts it
exactly. A `FunctionSite` is one such global: calling it calls whatever the global holds now (the original,
a recorder, a kernel), which is how parity replays recorded calls through the swapped function.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator

import torch


class FunctionSite:
    """The global `name` of the Python module `module`: `target` is its dotted path."""

    def __init__(self, module, name: str):
        self.module, self.name = module, name
        self.target = f"{module.__name__}.{name}"

    @property
    def current(self) -> Callable:
        return getattr(self.module, self.name)

    def set(self, fn: Callable) -> None:
        setattr(self.module, self.name, fn)

    def __call__(self, *args, **kwargs):
        return self.current(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionSite({self.target})"

    def __eq__(self, other) -> bool:  # two sites of one global are one site (recorded calls find their swap)
        return isinstance(other, FunctionSite) and other.module is self.module and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.target)


def site_of(target: str) -> FunctionSite | None:
    """The site of a dotted function path whose module is imported; None when there is no such function."""
    module_name, _, name = target.rpartition(".")
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except Exception:  # not importable here: no such site
            return None
    fn = getattr(module, name, None)
    return FunctionSite(module, name) if callable(fn) and not isinstance(fn, type) else None


def function_params(fn: Callable) -> list[str]:
    """A function's parameter names (a swapped-in kernel's are the function's it replaced: `__wrapped__`)."""
    import inspect

    from services.ops.hub_functions import plain_function

    try:
        return list(inspect.signature(plain_function(fn) or fn).parameters)
    except (TypeError, ValueError):
        return []


def modeling_modules(model: torch.nn.Module) -> list:
    """The Python modules that define the served model's classes (its modeling files), in first-use order."""
    names = dict.fromkeys(type(m).__module__ for m in model.modules())
    return [sys.modules[n] for n in names if n in sys.modules and n.startswith("transformers.models.")]


def model_functions(model: torch.nn.Module) -> dict:
    """{dotted path: what it computes and how it is called (a function family's Recognised)} of the functions an
    op family recognises in the model's modeling files."""
    from services.ops import functions_in

    found: dict = {}
    for module in modeling_modules(model):
        found.update(functions_in(module))
    return found


@contextlib.contextmanager
def wrapped(site: FunctionSite, around: Callable[[Callable], Callable]) -> Iterator[None]:
    """The site's global replaced by `around(original)` inside the block, the original restored after it."""
    original = site.current
    site.set(around(original))
    try:
        yield
    finally:
        site.set(original)


def function_state(model: torch.nn.Module, target: str) -> tuple[list[str], bool] | None:
    """(parameter names, swapped?) of a function target of the served model's modeling files, None when `target`
    is no function of them: the function-target answer to "how many instances run the kernel" (one global, so
    all or none)."""
    site = site_of(target)
    if site is None or site.module not in modeling_modules(model):
        return None
    from services.server.hotswap import KERNEL_MARK

    return function_params(site.current), bool(getattr(site.current, KERNEL_MARK, False))
