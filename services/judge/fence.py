"""CPU memory against an unmapped page: a read or write past a tensor's end (or before its start) faults at once.

Guard bytes (services.judge.run_cases.Guard) see writes around a tensor, never reads. A kernel that loads past
a row without a mask reads whatever follows the tensor: on the judge's CPU that is the allocator's slack, and it
passes; in production a tensor can end where a page does, and the same kernel crashes the server. On a CPU the
judge places each tensor so its last byte is the last byte before a page it made inaccessible (PROT_NONE): an
over-read or over-write there is a SIGSEGV of the child, a `memory-fault` verdict. Placed the other way
(`at_start`: the tensor's first byte right after the page), a read before its start faults the same way. Triton's
interpreter reads masked lanes only where the mask is set, so an honest kernel never touches the fence.

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


class Fenced:
    """`size` writable bytes with an inaccessible page on one side. `buffer` is the writable part (a memoryview of
    exactly `size` bytes): it ends at the fence, or with `at_start` it begins right after one (a read or write
    before the start faults). Keep the Fenced alive as long as it is used."""

    def __init__(self, size: int, *, at_start: bool = False):
        page = mmap.PAGESIZE
        usable = max(1, -(-size // page)) * page
        self._map = mmap.mmap(-1, usable + page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        anchor = ctypes.c_char.from_buffer(self._map)  # the mapping's address (the export pins the map open)
        self._anchor = anchor
        fence = ctypes.addressof(anchor) + (0 if at_start else usable)
        if _mprotect()(fence, page, PROT_NONE) != 0:
            raise OSError(ctypes.get_errno(), "mprotect of the fence page failed")
        view = memoryview(self._map)
        self.buffer = view[page : page + size] if at_start else view[usable - size : usable]
