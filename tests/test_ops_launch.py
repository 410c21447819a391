"""The direct launch (services.ops.launch): the same answers as Triton's own launch, never a compiled kernel
reused where Triton would have specialised another, and Triton's path wherever it cannot be direct."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from services.core.kernels import candidate_wrapper
from services.ops.launch import _spec, direct_launches
from services.ops.row_reduction import template

WIDTH = 1000  # not a multiple of 16: a row that starts one row in is not 16-byte aligned


def _wrapper():
    config = template.search_configs()[0]
    return candidate_wrapper(Path(tempfile.mkdtemp()), template.render(config), template.plan(config))


def _reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return w * normed


def test_the_key_separates_what_triton_specialises_on():
    base = torch.zeros(64)
    assert _spec(base)[1] and not _spec(base[1:])[1]  # 4 bytes in: not 16-byte aligned
    assert _spec(base) != _spec(base.double())
    assert len({_spec(n) for n in (1, 2, 17, 16, 2**31, 2**63)}) == 5  # 1, plain (2 and 17), 16k, i64, u64
    assert _spec(None) is None and _spec(0.5) == "f"
    with pytest.raises(TypeError):
        _spec("text")


def test_the_interpreter_always_takes_tritons_path():
    if torch.cuda.is_available():
        pytest.skip("the interpreter runs where no GPU is")
    entry = _wrapper()
    w = 1 + 0.1 * torch.randn(WIDTH)
    for _ in range(3):
        x = torch.randn(2, WIDTH)
        torch.testing.assert_close(entry(hidden_states=x, weight=w, eps=1e-6), _reference(x, w, 1e-6))
    assert direct_launches(entry) == 0


@pytest.mark.gpu
def test_direct_launches_answer_as_tritons_own_and_respecialise_where_it_would():
    entry = _wrapper()
    w = (1 + 0.1 * torch.randn(WIDTH, device="cuda")).bfloat16()
    buffer = torch.randn(40 * WIDTH + 8, device="cuda").bfloat16()
    first: dict = {}
    # rows 1 (Triton specialises an int of 1), 16 (a multiple of 16), 17; aligned and one element in: the first
    # pass launches through Triton, the second directly, and must answer bit for bit the same
    for again in (False, True):
        for rows in (1, 16, 17):
            for offset in (0, 1):
                x = buffer[offset : offset + rows * WIDTH].view(rows, WIDTH)
                assert (x.data_ptr() % 16 == 0) == (offset == 0)
                got = entry(hidden_states=x, weight=w, eps=1e-6)
                if again:
                    assert torch.equal(got, first[rows, offset]), (rows, offset)
                else:
                    first[rows, offset] = got
                    torch.testing.assert_close(got, _reference(x, w, 1e-6), atol=2e-2, rtol=2e-2)
    assert direct_launches(entry) == 6, direct_launches(entry)  # each key through Triton once, then direct
    # captured in a CUDA graph, the direct launch replays on the capturing stream
    x = buffer[: 4 * WIDTH].view(4, WIDTH)
    entry(hidden_states=x, weight=w, eps=1e-6)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = entry(hidden_states=x, weight=w, eps=1e-6)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, _reference(x, w, 1e-6), atol=2e-2, rtol=2e-2)
