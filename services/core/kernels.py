"""Loading a candidate's kernels from a real file, and the one binder from a live module to its wrapper.

Shared by the judge's sandbox child (correctness, timing) and the server's hot-swap, so the kernel
that was judged is called exactly the way it will be served. A candidate is data: its source holds
only @triton.jit kernels (checked by services.core.kernel_schema before anything here runs), and the
Python that calls them is its op family's wrapper (services.ops), built from the launch plan.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

from services.core.pb import events_pb2 as pb

_CASTS = {"float": float, "int": int}


class KernelLoadError(RuntimeError):
    """The candidate's kernels could not be imported, or its plan names one the source lacks."""


def sha256(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def candidate_sha256(source: str, plan: pb.LaunchPlan) -> str:
    """The identity of what is judged and served: the kernel source and its launch plan together.

    A candidate without a plan (recorded before candidates became data) is identified by its source.
    """
    if plan.ByteSize() == 0:
        return sha256(source)
    return hashlib.sha256(source.encode() + b"\0" + plan.SerializeToString(deterministic=True)).hexdigest()


def write_source(directory: Path, source: str) -> Path:
    """Write source to `<dir>/k_<sha>.py`: a real file, because @triton.jit reads its function's source."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"k_{sha256(source)[:16]}.py"
    if not path.exists() or path.read_text() != source:
        path.write_text(source)
    return path


def load_kernels(path: Path, names: list[str]) -> dict[str, Callable]:
    """Import the file as a fresh module (importlib, never exec) and return the named @triton.jit kernels.

    Only a source that passed the kernel schema may come here: its module level is imports of triton,
    constants and kernel definitions, so importing it runs no host code of the candidate's author.
    """
    name = f"yantra_kernel_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise KernelLoadError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton resolves globals through the module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise KernelLoadError(f"the kernels do not import: {type(exc).__name__}: {exc}") from exc
    missing = [n for n in names if not callable(getattr(module, n, None))]
    if missing:
        raise KernelLoadError(f"the source defines no kernel {', '.join(missing)}")
    return {n: getattr(module, n) for n in names}


def candidate_wrapper(directory: Path, source: str, plan: pb.LaunchPlan, **options) -> Callable:
    """The op family's wrapper running `plan` with the source's kernels (options: the family's make_forward's)."""
    from services.ops import UnknownFamily, family

    try:
        ops = family(plan.family)
    except UnknownFamily as exc:
        raise KernelLoadError(str(exc)) from exc
    kernels = load_kernels(write_source(directory, source), sorted({launch.kernel for launch in plan.launches}))
    return ops.make_forward(plan, kernels, **options)


def bind(contract: pb.Contract, entry: Callable) -> Callable:
    """call(module, args, kwargs): `entry` with the contract's inputs and the bindings read from `module`.

    Strict: an argument the contract does not name is an error (unless it has a `**` input), never dropped, so
    parity on recorded live calls catches a contract that does not fit how the model calls the module. Bindings
    are read on every call (not captured), so weights updated in place keep serving, and cast to
    their kind (a float eps stays a float whatever the module holds).
    """
    # An input spelled "**name" (a layer's **kwargs, passed through to its children) lets other keywords pass.
    inputs = [name for name in contract.inputs if not name.startswith("*")]
    passes_keywords = any(name.startswith("**") for name in contract.inputs)
    renamed = dict(zip(contract.inputs, contract.entry_inputs, strict=True)) if contract.entry_inputs else {}
    bindings = [(b.param, b.attr, _CASTS.get(b.kind)) for b in contract.bindings]
    target = contract.target

    def call(module, args: tuple, kwargs: dict):
        if len(args) > len(inputs):
            raise TypeError(f"patched {target}.forward takes {len(inputs)} inputs {inputs}, got {len(args)}")
        named = dict(zip(inputs, args, strict=False))
        for name, value in kwargs.items():
            if name in named or (name not in inputs and not passes_keywords):
                raise TypeError(f"patched {target}.forward got an unexpected argument {name!r}")
            named[name] = value
        if renamed:  # the forward's names for the inputs -> the entrypoint's
            named = {renamed.get(name, name): value for name, value in named.items()}
        for param, attr, cast in bindings:
            value = getattr(module, attr)
            named[param] = cast(value) if cast else value
        return entry(**named)

    return call


def bound_forward(module, entry: Callable, contract: pb.Contract) -> Callable:
    """A forward for one `module` instance through `bind` (the judge's oracle instances)."""
    call = bind(contract, entry)

    def forward(*args, **kwargs):
        return call(module, args, kwargs)

    return forward
