"""The timed graph replayed with its outputs poisoned, on a CUDA GPU (services.judge.timing.poisoned_replays).

An honest kernel with a large fp32 output (an fp32 weight on bf16 activations: HF's RMSNorm returns fp32) must pass:
on an H100 one replay after its 25 MB of outputs were poisoned took 1.67x a warm replay (the poisoning leaves the
cache full of dirty lines), and the corpus's honest `mixed_fp32_weight_bf16_input` was refused for it. A kernel
that trusts an output holding a finite answer, and skips its work then, must still be refused.
These kernels run here directly (no sandbox, no static rules): the timing check alone is under test.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu
ROWS, WIDTH, EPS = 4096, 1536, 1e-6


def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def rms(x, w, y, cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < cols
        v = tl.load(x + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
        norm = (v * tl.rsqrt(tl.sum(v * v, axis=0) / cols + eps)).to(tl.bfloat16).to(tl.float32)
        tl.store(y + row * cols + offs, norm * tl.load(w + offs, mask=mask, other=0.0), mask=mask)

    @triton.jit
    def trusting(x, w, y, cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < cols
        held = tl.load(y + row * cols + offs, mask=mask, other=0.0)
        if tl.sum(tl.where(held == held, 0.0, 1.0), axis=0) > 0:  # a NaN held: compute; a finite row: keep it
            v = tl.load(x + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
            norm = (v * tl.rsqrt(tl.sum(v * v, axis=0) / cols + eps)).to(tl.bfloat16).to(tl.float32)
            tl.store(y + row * cols + offs, norm * tl.load(w + offs, mask=mask, other=0.0), mask=mask)

    return rms, trusting


def _timed(kernel):
    """The kernel's timed graph over rotated inputs, as the judge captures it, and its per-call figures."""
    import torch
    import triton

    from services.judge.timing import capture, fresh_buffers, graph_calls, poison_outputs

    weight = torch.randn(WIDTH, device="cuda", dtype=torch.float32)

    def fn(x):
        y = torch.empty(x.shape, device="cuda", dtype=torch.float32)
        kernel[(ROWS,)](x, weight, y, WIDTH, EPS, BLOCK=triton.next_power_of_2(WIDTH))
        return y

    def reference(x):
        xf = x.float()
        return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)

    buffers = fresh_buffers((ROWS, WIDTH), torch.bfloat16, 4, nonce=7, shape_index=0)
    captured = capture(fn, buffers, graph_calls(ROWS * WIDTH * 6, 8))
    poison_outputs(captured.outputs)  # the first replay computes every output; later ones meet their own answer
    captured.graph.replay()
    torch.cuda.synchronize()
    return captured, reference, [captured.per_call_us() for _ in range(3)]


def test_an_honest_kernel_with_a_large_fp32_output_takes_what_it_takes_when_its_outputs_are_poisoned():
    from services.judge.timing import poisoned_replays

    rms, _ = _kernels()
    captured, reference, others = _timed(rms)
    figure = poisoned_replays(captured, reference, others, f"{ROWS}x{WIDTH}")
    print(f"poisoned {figure:.2f} us a call, rounds {min(others):.2f}-{max(others):.2f} us")


def test_a_kernel_that_keeps_a_finite_output_is_refused_on_its_poisoned_replays():
    from services.judge.timing import ReplayMismatch, poisoned_replays

    _, trusting = _kernels()
    captured, reference, others = _timed(trusting)
    with pytest.raises(ReplayMismatch, match="its work depends on what its outputs held"):
        poisoned_replays(captured, reference, others, f"{ROWS}x{WIDTH}")
