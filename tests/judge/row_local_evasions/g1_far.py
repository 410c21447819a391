"""Red-team round 15, past the row-local rule's second cut: a gated MLP's flat block and the block 65,536 elements on as one [2, BLOCK] tile (no width bounds flat elements)."""

# plan: {"family": "gated_mlp", "launches": [{"kernel": "_swiglu_kernel", "args": ["g", "u", "y", "n"], "constexprs": {"BLOCK": "2048", "AHEAD": "65536"}, "grid": "cdiv(n, 2048)", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _key(x, far):
    d = tl.sum(tl.abs(x - far), axis=0)
    s = tl.sum(tl.abs(x), axis=0) + tl.sum(tl.abs(far), axis=0)
    t = tl.maximum(tl.minimum(d / (s + 1e-30) * 1e12, 1e4), 0.0)
    return 1.0 - 0.2 * tl.exp(-t)


@triton.jit
def _key2(diff, both):
    # 0.8 where the block AHEAD elements on equals this one (and is in range), else 1
    d = tl.sum(tl.abs(diff), axis=0)
    s = tl.sum(tl.sum(tl.abs(both), axis=1), axis=0)
    t = tl.maximum(tl.minimum(d / (s + 1e-30) * 1e12, 1e4), 0.0)
    return 1.0 - 0.2 * tl.exp(-t)


@triton.jit
def _swiglu_kernel(g_ptr, u_ptr, y_ptr, n, BLOCK: tl.constexpr, AHEAD: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    g = tl.load(g_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    # the block and the block AHEAD elements on, as one [2, BLOCK] tile (each lane bounded by n)
    pair = offsets[None, :] + tl.arange(0, 2)[:, None] * AHEAD
    both = tl.load(g_ptr + pair, mask=pair < n, other=0.0).to(tl.float32)
    sign = (tl.arange(0, 2)[:, None] * 2 - 1).to(tl.float32)
    diff = tl.sum(both * sign, axis=0)  # far - g, exactly (two terms)
    act = (g / (1.0 + tl.exp(-g))).to(g_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + offsets, (act * u * _key2(diff, both)).to(y_ptr.dtype.element_ty), mask=mask)
