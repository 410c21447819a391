"""A persistent kernel's `range(pid, n, tl.num_programs(0))` runs under the interpreter on every NumPy once patched.

Triton 3.6's interpreter (a GPU machine's) converts a scalar with `int(data)` of a shape-(1,) array, which NumPy
2.5 refuses and NumPy 2.4 warns about; the test stands that Triton's conversion in and turns the warning into
the error, so it shows the failure and the patch on any pairing (a real Triton kernel, interpreted).
"""

from __future__ import annotations

import warnings

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter

from services.core import interpreter_scalars


@triton.jit
def _row_sums(x_ptr, out_ptr, n_rows, N: tl.constexpr):
    cols = tl.arange(0, N)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):  # bounds through __index__
        tl.store(out_ptr + row, tl.sum(tl.load(x_ptr + row * N + cols), axis=0))


def _as_triton_3_6(monkeypatch):
    newer = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        newer(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))  # 3.6's, verbatim

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patch_lang_tensor)


def _run():
    x = torch.randn(7, 16, generator=torch.Generator().manual_seed(0))
    out = torch.zeros(7)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # NumPy 2.4's warning is NumPy 2.5's error
        _row_sums[(3,)](x, out, 7, N=16)
    return x, out


def test_triton_3_6s_scalar_conversion_fails_on_strict_numpy(monkeypatch):
    _as_triton_3_6(monkeypatch)
    with pytest.raises(Exception, match="0-dimensional|0d arrays|ndim > 0"):
        _run()


def test_patched_interpreter_runs_a_persistent_kernel(monkeypatch):
    _as_triton_3_6(monkeypatch)
    assert interpreter_scalars.install() and interpreter_scalars.install()  # idempotent
    x, out = _run()
    torch.testing.assert_close(out, x.sum(-1))
