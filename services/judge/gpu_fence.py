"""GPU memory against unmapped addresses: a read or write past a tensor's end (or before its start) faults at once.

The CPU's fences (services.judge.fence) and the fenced pass (services.judge.fenced_pass) see every over-read the
interpreter reaches, but not one whose offset steps with a shape only at the row counts a GPU judging draws and a
CPU cannot run (a row count divided by a fixed number, 131,072 rows): on the GPU that read lands in the caching
allocator's neighbouring blocks and passes. Here the GPU child's tensors get the CPU's layout: with the driver's
virtual memory calls (cuMemAddressReserve / cuMemCreate / cuMemMap), each tensor is mapped so its last byte is the
last mapped one before ZONE_BYTES of reserved, unmapped addresses (or, `at_start`, its first byte right after
them). A load or store there is an MMU fault: "an illegal memory access was encountered", after which the CUDA
context is lost, so the child ends at once with GPU_FAULT_EXIT and the parent judges `memory-fault`, as it does
a CPU child's SIGSEGV. Masked lanes never touch memory, so an honest kernel never meets a zone.

Where the driver lacks these calls (or the first allocation fails its own check), the child keeps the caching
allocator's memory and its canaries, and says so (`status()`, recorded among the sandbox's walls).
Stdlib ctypes against the libcuda torch already loaded: nothing new is installed or spawned.
"""

from __future__ import annotations

import ctypes
import os
import re

from services.judge.fence import ZONE_BYTES, round_up  # the CPU's zones and rounding: the same layout on a GPU

GPU_FAULT_EXIT = 139  # the child's exit code after a GPU memory fault (a shell's figure for SIGSEGV: 128 + 11)
_FAULT = re.compile(r"illegal memory access|CUDA_ERROR_ILLEGAL_ADDRESS|misaligned address", re.I)


def is_fault(exc: BaseException) -> bool:
    """Whether `exc` is the CUDA error an access outside mapped memory raises (at the launch or any later sync)."""
    return bool(_FAULT.search(f"{type(exc).__name__}: {exc}"))


def exit_on_fault(exc: BaseException) -> None:
    """End the child at once when `exc` is a GPU memory fault: its context is lost, nothing after it would run. The
    child has no answer to give, so the why goes to its log (stderr), whose tail the judge keeps in its error."""
    if is_fault(exc):
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        os.write(2, f"\ngpu fence: the GPU faulted ({first}); {status() or 'fence state unknown'}\n".encode())
        os._exit(GPU_FAULT_EXIT)


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_PINNED, _ON_DEVICE, _READ_WRITE, _MINIMUM = 1, 1, 3, 0
_state: dict = {"driver": None, "status": "", "granularity": {}}


def _driver():
    if _state["driver"] is None:
        cuda = ctypes.CDLL("libcuda.so.1")  # already loaded by torch: the same handle, no search, no ldconfig
        u64, size, ptr = ctypes.c_uint64, ctypes.c_size_t, ctypes.POINTER
        for name, args in {
            "cuMemGetAllocationGranularity": (ptr(size), ptr(_AllocationProp), ctypes.c_int),
            "cuMemAddressReserve": (ptr(u64), size, size, u64, u64),
            "cuMemCreate": (ptr(u64), size, ptr(_AllocationProp), u64),
            "cuMemMap": (u64, size, size, u64, u64),
            "cuMemSetAccess": (u64, size, ptr(_AccessDesc), size),
            "cuMemUnmap": (u64, size),
            "cuMemRelease": (u64,),
            "cuMemAddressFree": (u64, size),
        }.items():
            fn = getattr(cuda, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        _state["driver"] = cuda
    return _state["driver"]


def _check(result: int, what: str) -> None:
    if result != 0:
        raise OSError(f"{what} failed: CUresult {result}")


def _prop(device: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type, prop.location = _PINNED, _Location(_ON_DEVICE, device)
    return prop


def _granularity(device: int) -> int:
    if device not in _state["granularity"]:
        got = ctypes.c_size_t()
        _check(_driver().cuMemGetAllocationGranularity(ctypes.byref(got), ctypes.byref(_prop(device)), _MINIMUM),
               "cuMemGetAllocationGranularity")  # fmt: skip
        _state["granularity"][device] = got.value
    return _state["granularity"][device]


class _Interface:
    """A device buffer as `__cuda_array_interface__` (bytes). torch holds it as long as the tensor lives, and it
    holds the mapping: the mapping is released when the last tensor viewing it is gone."""

    def __init__(self, address: int, size: int, mapping: _Mapping):
        self.mapping = mapping
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False), "version": 2}


class _Mapping:
    """`mapped` bytes of GPU `device` memory mapped between two reserved, unmapped zones of `zone` bytes."""

    def __init__(self, mapped: int, zone: int, device: int):
        cuda = _driver()
        self.mapped, self.zone, self.device = mapped, zone, device
        self.span, self.handle, self.base = zone + mapped + zone, ctypes.c_uint64(), ctypes.c_uint64()
        _check(cuda.cuMemAddressReserve(ctypes.byref(self.base), self.span, 0, 0, 0), "cuMemAddressReserve")
        self.start = self.base.value + zone
        try:
            _check(cuda.cuMemCreate(ctypes.byref(self.handle), mapped, ctypes.byref(_prop(device)), 0), "cuMemCreate")
            _check(cuda.cuMemMap(self.start, mapped, 0, self.handle.value, 0), "cuMemMap")
            access = _AccessDesc(_Location(_ON_DEVICE, device), _READ_WRITE)
            _check(cuda.cuMemSetAccess(self.start, mapped, ctypes.byref(access), 1), "cuMemSetAccess")
        except OSError:
            self._release()
            raise

    def _release(self) -> None:
        cuda = _driver()
        cuda.cuMemUnmap(self.start, self.mapped)  # an error where nothing was mapped yet: nothing to undo
        if self.handle.value:
            cuda.cuMemRelease(self.handle.value)
        cuda.cuMemAddressFree(self.base.value, self.span)
        self.handle = ctypes.c_uint64()

    def __del__(self):  # kernels that used it may still be queued: wait for them before unmapping
        try:
            import torch

            torch.cuda.synchronize(self.device)
            self._release()
        except Exception:  # a process ending (the driver gone first): its memory goes with it
            pass


def fenced_bytes(size: int, device: int, *, at_start: bool = False, zone: int = ZONE_BYTES):
    """`size` writable bytes on GPU `device` (a uint8 tensor) between reserved, unmapped zones: its last byte is the
    last mapped one, or with `at_start` its first byte is the first mapped one. As on a CPU, a tensor ending exactly
    there may start off Triton's 16-byte alignment (an odd width at an odd row count): Triton then specialises the
    kernel without that hint, which changes its speed, never its answer, and these runs are not timed."""
    import torch

    unit = _granularity(device)
    mapping = _Mapping(round_up(size, unit), round_up(zone, unit), device)
    # Fresh physical memory holds whatever it last held. Zeroed whole, the slack on the tensor's other side reads
    # as zeros, as a CPU fence's fresh page does: what a read there returns (before the rerun against the other
    # zone faults it) never depends on the machine's history, so a verdict does not either.
    torch.as_tensor(_Interface(mapping.start, mapping.mapped, mapping), device=f"cuda:{device}").zero_()
    address = mapping.start if at_start else mapping.start + mapping.mapped - size
    return torch.as_tensor(_Interface(address, size, mapping), device=f"cuda:{device}")


def available(device) -> bool:
    """Whether tensors on `device` (a torch.device) can be fenced: once per process, a fenced buffer is made, written
    and read back through torch; on any failure the reason is kept (`status()`) and the answer is False."""
    if os.environ.get("YANTRA_JUDGE_GPU_FENCE", "1") == "0":
        _state["status"] = "gpu fence: switched off (YANTRA_JUDGE_GPU_FENCE=0): canaries only"
        return False
    if "probed" not in _state:
        try:
            import torch

            torch.empty(1, device=device)  # the device's context current on this thread: the driver calls use it
            probe = fenced_bytes(4096 + 3, device_index(device))
            probe.fill_(7)
            if int(probe.sum()) != 7 * 4099:
                raise OSError("a fenced buffer did not read back what was written")
            torch.cuda.synchronize(device)
            _state["probed"] = True
        except Exception as exc:  # an older driver, no VMM support: the canaries still stand
            _state["probed"] = False
            _state["why"] = f"{type(exc).__name__}: {exc}"[:240]
    if _state["probed"]:
        _state["status"] = f"gpu fence: {ZONE_BYTES >> 20} MiB of unmapped addresses beside every tensor"
    else:
        _state["status"] = f"gpu fence unavailable ({_state['why']}): canaries only"
    return _state["probed"]


def device_index(device) -> int:
    """The ordinal of a CUDA torch.device: its own, or the current device's where it names none."""
    import torch

    return torch.cuda.current_device() if device.index is None else device.index


def status() -> str:
    """What `available` found, for the sandbox's record ("" before it was asked)."""
    return _state["status"]
