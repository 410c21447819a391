"""Loading candidate kernel source from a real file and binding it to a live module.

Shared by the judge's sandbox child (correctness, timing) and the server's hot-swap, so the
kernel that was judged is called exactly the way it will be served.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

from services.core.pb import events_pb2 as pb


class KernelLoadError(RuntimeError):
    """The candidate source could not be imported or lacks its entrypoint."""


def sha256(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def write_source(directory: Path, source: str) -> Path:
    """Write source to `<dir>/k_<sha>.py`: a real file, because @triton.jit reads its function's source."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"k_{sha256(source)[:16]}.py"
    if not path.exists() or path.read_text() != source:
        path.write_text(source)
    return path


def load_entrypoint(path: Path, entrypoint: str) -> Callable:
    """Import the file as a fresh module (importlib, never exec) and return its entrypoint."""
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
        raise KernelLoadError(f"candidate does not import: {type(exc).__name__}: {exc}") from exc
    fn = getattr(module, entrypoint, None)
    if not callable(fn):
        raise KernelLoadError(f"candidate has no callable entrypoint {entrypoint!r}")
    return fn


def bound_forward(module, entry: Callable, contract: pb.Contract) -> Callable:
    """A forward for `module` that calls the kernel with the contract's bindings, read at call time.

    Attributes are read on every call (not captured), so a module whose weights are updated in
    place keeps serving its current weights.
    """
    bindings = [(b.param, b.attr) for b in contract.bindings]
    inputs = list(contract.inputs)

    def forward(*args, **kwargs):
        call_kwargs = {param: getattr(module, attr) for param, attr in bindings}
        for name, value in zip(inputs, args, strict=False):
            call_kwargs[name] = value
        for name in inputs[len(args) :]:
            if name in kwargs:
                call_kwargs[name] = kwargs[name]
        return entry(**call_kwargs)

    return forward
