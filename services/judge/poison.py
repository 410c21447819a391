"""Poisoned allocation inside the sandbox child: memory the candidate leaves unwritten reads as poison.

Two mechanisms, because neither suffices alone:
- torch's uninitialised allocators (torch.empty, empty_like, empty_strided, Tensor.new_empty) are
  wrapped before the candidate is imported, so while the judge checks a call every buffer the
  candidate allocates comes back filled with the poison byte (0xFF is NaN in every float dtype);
  on CPU this is the only thing that works, since glibc's aligned allocations rarely hand back the
  block just freed;
- freed blocks of the output's size are filled first (services.judge.correctness.poison_allocator),
  for memory that reaches the candidate some other way (the CUDA caching allocator recycles them).
Outside the checks (timing) the originals are put back, so timing pays nothing for this.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

NAN_BYTE = 0xFF  # all ones: NaN in fp32, fp16 and bf16
PATTERN_BYTE = 0x5A  # finite in every float dtype (fp32 ~1.5e16, bf16 ~1.5e16, fp16 203.25)
_NAMES = (("torch", "empty"), ("torch", "empty_like"), ("torch", "empty_strided"), ("Tensor", "new_empty"))


def _owner(name: str):
    return torch if name == "torch" else torch.Tensor


def _fill(tensor: torch.Tensor, byte: int) -> torch.Tensor:
    storage = tensor.untyped_storage()
    if storage.nbytes():
        raw = torch.tensor([], dtype=torch.uint8, device=tensor.device)
        raw.set_(storage)
        raw.fill_(byte)
    return tensor


class Poison:
    """While `filling(byte)` is active, every uninitialised torch allocation comes back full of `byte`."""

    def __init__(self) -> None:
        self.byte: int | None = None
        self.originals = {(o, n): getattr(_owner(o), n) for o, n in _NAMES}
        self.wrappers = {key: self._wrap(fn) for key, fn in self.originals.items()}

    def _wrap(self, fn):
        def allocate(*args, **kwargs):
            out = fn(*args, **kwargs)
            return out if self.byte is None else _fill(out, self.byte)

        allocate.__name__ = getattr(fn, "__name__", "allocate")
        allocate.__doc__ = getattr(fn, "__doc__", None)
        return allocate

    def install(self) -> None:
        # torch's `with torch.device(...)` recognises factory functions by identity, from a set it builds once,
        # on first use. Built after the wrappers went in, it would hold them, not the builtins they call, and a
        # module built under the context (the oracle) would allocate with torch.empty on the CPU (nn.LayerNorm
        # does): so it is built first, from the originals.
        try:
            from torch.utils._device import _device_constructors

            _device_constructors()
        except ImportError:  # a torch without the device context has nothing to warm
            pass
        for (owner, name), wrapper in self.wrappers.items():
            setattr(_owner(owner), name, wrapper)

    def uninstall(self) -> None:
        for (owner, name), original in self.originals.items():
            setattr(_owner(owner), name, original)

    @contextmanager
    def filling(self, byte: int) -> Iterator[None]:
        previous, self.byte = self.byte, byte
        try:
            yield
        finally:
            self.byte = previous

    @contextmanager
    def lifted(self) -> Iterator[None]:
        """The plain allocators for a while (timing), the wrappers back afterwards."""
        self.uninstall()
        try:
            yield
        finally:
            self.install()


POISON = Poison()
