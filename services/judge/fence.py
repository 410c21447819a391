"""CPU memory against an unmapped page: a read or write past a tensor's end (or before its start) faults at once.

Guard bytes (services.judge.run_cases.Guard) see writes around a tensor, never reads. A kernel that loads past
a row without a mask reads whatever follows the tensor: on the judge's CPU that is the allocator's slack, and it
passes; in production a tensor can end where a page does, and the same kernel crashes the server. On a CPU the
judge places each tensor so its last byte is the last byte before memory it made inaccessible (PROT_NONE, 8 MiB of
it): an over-read or over-write there is a SIGSEGV of the child, a `memory-fault` verdict. Placed the other way
(`at_start`: the tensor's first byte right after the zone), a read before its start faults the same way; on the
other side lie the rest of the tensor's page and another zone, so a read or write farther out than a page faults
either way. Triton's interpreter reads masked lanes only where the mask is set, so an honest kernel never touches a
fence.

Stdlib only (mmap, ctypes), used by the sandbox child before and after its walls are up (mprotect is a
system call the walls allow: it maps nothing new).
"""

from __future__ import annotations

import ctypes
import mmap

PROT_NONE = 0
_libc = None


def _mprotect():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols: no ldconfig (the walls refuse it)
        _libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return _libc.mprotect


# Inaccessible bytes on each side of every fenced tensor: a read or write up to this far outside it faults too, not
# only one just past its end (an offset of a whole tensor's size, a row count of rows too many). Address space only
# (nothing is touched); a judging keeps ~150 alive at its peak, well inside the child's 16 GiB.
ZONE_BYTES = 8 << 20


def round_up(n: int, unit: int) -> int:
    """`n` bytes rounded up to whole `unit`s, at least one (a page here; the GPU's mapping granularity in gpu_fence)."""
    return max(1, -(-n // unit)) * unit


class Fenced:
    """`size` writable bytes between two inaccessible zones (ZONE_BYTES each). `buffer` is the writable part (a
    memoryview of exactly `size` bytes): it ends where the zone after it begins, or with `at_start` it begins where
    the zone before it ends; on its other side the rest of its page lies between it and the other zone. Keep the
    Fenced alive as long as it is used."""

    def __init__(self, size: int, *, at_start: bool = False, zone: int = ZONE_BYTES):
        page = mmap.PAGESIZE
        usable, zone = round_up(size, page), round_up(zone, page)
        self._map = mmap.mmap(-1, zone + usable + zone, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        anchor = ctypes.c_char.from_buffer(self._map)  # the mapping's address (the export pins the map open)
        self._anchor = anchor
        base = ctypes.addressof(anchor)
        for fence in (base, base + zone + usable):
            if _mprotect()(fence, zone, PROT_NONE) != 0:
                raise OSError(ctypes.get_errno(), "mprotect of a fence zone failed")
        view = memoryview(self._map)
        self.buffer = view[zone : zone + size] if at_start else view[zone + usable - size : zone + usable]
