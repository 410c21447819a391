"""The static schema check for kernel sources: honest kernels pass, host code and escapes are refused."""

from __future__ import annotations

import textwrap

import pytest

from services.core.kernel_schema import (
    MAX_SOURCE_CHARS,
    RULES,
    TL_ALLOWED,
    KernelSignature,
    check_kernel_source,
    summary,
)

RMSNORM = '''"""RMSNorm kernel."""

from __future__ import annotations

import triton
import triton.language as tl

MAX_BLOCK: tl.constexpr = 65536


@triton.jit
def _rmsnorm_fwd_kernel(x_ptr, w_ptr, y_ptr, n_rows, eps, N_COLS: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    first_row = tl.program_id(0) * ROWS
    cols = tl.arange(0, BLOCK)
    col_mask = cols < N_COLS
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    for r in tl.static_range(ROWS):
        row = first_row + r
        mask = cols < tl.where(row < n_rows, N_COLS, 0)
        x = tl.load(x_ptr + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)
        variance = tl.sum(x * x, axis=0) / N_COLS
        normed = x * tl.rsqrt(variance + eps)
        normed = normed.to(x_ptr.dtype.element_ty).to(tl.float32)
        y = w * normed
        tl.store(y_ptr + row * N_COLS + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
'''  # noqa: E501 (the shipped kernel, verbatim)

TWO_PASS = '''"""Two-pass RMSNorm with a device helper."""

import triton
import triton.language as tl

EPS_FLOOR = tl.constexpr(1e-12)
NEG = -1
USE_MATH = tl.constexpr(True)


@triton.jit
def _sum_squares(x_ptr, row, N, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    return tl.sum(acc, axis=0)


@triton.jit
def rmsnorm_two_pass(x_ptr, y_ptr, n_rows, N, eps=1e-6, BLOCK: tl.constexpr = 1024):
    tl.device_assert(n_rows > 0, "rows")
    pid = tl.program_id(0)
    if pid == 0:
        tl.static_assert(BLOCK > 0)
    inv = tl.math.rsqrt(_sum_squares(x_ptr, pid, N, BLOCK) / N + max(eps, EPS_FLOOR))
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + pid * N + cols, mask=cols < N, other=0.0)
        grid = x[:, None] * tl.full((1, 1), 1.0, tl.float32)
        out = tl.reshape(grid, (BLOCK,)) * inv
        tl.store(y_ptr + pid * N + cols, out.to(y_ptr.dtype.element_ty), mask=cols < N)
'''


def _kernel(body: str, params: str = "x_ptr, y_ptr, N, BLOCK: tl.constexpr", prelude: str = "") -> str:
    """A small valid module around one kernel whose body is `body`."""
    return (
        "import triton\nimport triton.language as tl\n"
        + textwrap.dedent(prelude)
        + f"\n\n@triton.jit\ndef k({params}):\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
    )


def _rules(source: str) -> set[str]:
    return {f.rule_id for f in check_kernel_source(source).findings}


def test_shipped_rmsnorm_kernel_passes():
    report = check_kernel_source(RMSNORM)
    assert report.passed, summary(report)
    assert report.findings == ()
    assert summary(report) == ""
    assert report.rules_checked == tuple(RULES)


def test_kernels_returns_the_signature():
    sig = check_kernel_source(RMSNORM).kernels["_rmsnorm_fwd_kernel"]
    assert sig == KernelSignature(
        name="_rmsnorm_fwd_kernel",
        params=("x_ptr", "w_ptr", "y_ptr", "n_rows", "eps", "N_COLS", "BLOCK", "ROWS"),
        constexprs=frozenset({"N_COLS", "BLOCK", "ROWS"}),
        defaults=frozenset(),
        line=12,
    )


def test_two_pass_kernel_with_device_helper_passes():
    report = check_kernel_source(TWO_PASS)
    assert report.passed, summary(report)
    assert set(report.kernels) == {"_sum_squares", "rmsnorm_two_pass"}
    sig = report.kernels["rmsnorm_two_pass"]
    assert sig.defaults == frozenset({"eps", "BLOCK"})
    assert sig.constexprs == frozenset({"BLOCK"})


def test_allowlist_covers_the_kernel_basics_and_not_atomics():
    assert {"tl.load", "tl.store", "tl.math.rsqrt", "tl.float32", "tl.static_range"} <= TL_ALLOWED
    assert not any("atomic" in name or "extra" in name or "rand" in name for name in TL_ALLOWED)


@pytest.mark.parametrize(
    ("source", "rule"),
    [
        # module level
        (_kernel("pass", prelude="\ndef helper(x):\n    return x\n"), "host-code"),
        (_kernel("pass", prelude="import os\n"), "kernel-import"),
        (_kernel("pass", prelude="import torch\n"), "kernel-import"),
        (_kernel("pass", prelude="from triton import testing\n"), "kernel-import"),
        (_kernel("pass", prelude="import triton.language as T\n"), "kernel-import"),
        (_kernel("pass", prelude="print(1)\n"), "host-code"),
        (_kernel("pass", prelude="X = [1, 2]\n"), "host-code"),
        (_kernel("pass", prelude="A, B = 1, 2\n"), "host-code"),
        (_kernel("pass", prelude="if True:\n    X = 1\n"), "host-code"),
        (_kernel("pass", prelude="class C:\n    pass\n"), "host-code"),
        # decorators
        (
            "import triton\nimport triton.language as tl\n\n"
            '@triton.heuristics({"B": lambda a: 4})\n@triton.jit\ndef k(x, B: tl.constexpr):\n    pass\n',
            "kernel-decorator",
        ),
        (
            "import triton\n\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef k(x):\n    pass\n",
            "kernel-decorator",
        ),
        ("import triton\n\n@triton.jit(debug=True)\ndef k(x):\n    pass\n", "kernel-decorator"),
        ("import triton\njit = 1\n\n@jit\ndef k(x):\n    pass\n", "kernel-decorator"),
        # parameters
        (_kernel("pass", params="x_ptr, *args"), "kernel-parameter"),
        (_kernel("pass", params="x_ptr, **kw"), "kernel-parameter"),
        (_kernel("pass", params="x_ptr, opts=[]"), "kernel-parameter"),
        (_kernel("pass", params="x_ptr, *, N"), "kernel-parameter"),
        (_kernel("pass", params="x_ptr, N: int"), "kernel-parameter"),
        (_kernel("pass", params="x_ptr, __class__"), "kernel-parameter"),
        # constructs
        (_kernel("f = lambda a: a\n"), "kernel-construct"),
        (_kernel("def inner():\n    pass\n"), "kernel-construct"),
        (_kernel("try:\n    x = 1\nexcept Exception:\n    x = 2\n"), "kernel-construct"),
        (_kernel("global X\n"), "kernel-construct"),
        (_kernel('tl.static_print(f"{N}")\n'), "kernel-construct"),
        (_kernel("assert N > 0\n"), "kernel-construct"),
        (_kernel("x = [a for a in range(3)]\n"), "kernel-construct"),
        (_kernel("x = {1: 2}\n"), "kernel-construct"),
        (_kernel("with N:\n    pass\n"), "kernel-construct"),
        (_kernel("y = (x := N)\n"), "kernel-construct"),
        # calls
        (_kernel('d["x"](1)\n', params="x_ptr, d"), "kernel-call"),
        (_kernel("f(a)(b)\n", params="f, a, b"), "kernel-call"),
        (_kernel("fn(x_ptr)\n", params="x_ptr, fn"), "kernel-call"),
        # attributes and names
        (_kernel('x_ptr.handle.data.tofile("/tmp/x")\n'), "kernel-attribute"),
        (_kernel("c = x_ptr.__class__\n"), "kernel-attribute"),
        (_kernel("f = x_ptr.gi_frame.f_back\n"), "kernel-attribute"),
        (_kernel("tl.atomic_add(x_ptr, 1)\n"), "kernel-attribute"),
        (_kernel("x_ptr.x = 1\n"), "kernel-attribute"),
        (_kernel("sys._getframe()\n"), "kernel-name"),
        (_kernel('eval("1")\n'), "kernel-name"),
        (_kernel('open("f")\n'), "kernel-name"),
        (_kernel("triton.language.load(x_ptr)\n"), "kernel-name"),
        (_kernel("range = x_ptr\n"), "kernel-name"),
        # inline asm / clocks
        (
            _kernel(
                'tl.inline_asm_elementwise("mov.u32 $0, %clock;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)\n'
            ),
            "inline-asm",
        ),
        (_kernel("t = tl.extra.cuda.globaltimer()\n"), "inline-asm"),
    ],
)
def test_hostile_source_is_refused_with_its_rule(source: str, rule: str):
    report = check_kernel_source(source)
    assert not report.passed
    assert rule in {f.rule_id for f in report.findings}, summary(report)
    for finding in report.findings:
        assert finding.rule_id in RULES and finding.reason and "\n" not in finding.reason


def test_host_code_reason_names_the_function_and_line():
    source = _kernel("pass", prelude="\ndef helper(x):\n    return x\n")
    (finding,) = check_kernel_source(source).findings
    assert finding.rule_id == "host-code"
    assert "`helper`" in finding.reason and "only @triton.jit kernels may be defined" in finding.reason
    assert finding.line == 4


def test_only_a_plain_function_is_host_code_and_no_kernel():
    report = check_kernel_source("def f(x):\n    return x\n")
    assert {f.rule_id for f in report.findings} == {"host-code", "no-jit-kernel"}
    assert report.kernels == {}


def test_every_finding_is_reported_in_source_order_and_deduplicated():
    source = _kernel(
        "x_ptr.handle.data.tofile('/tmp/x')\nf = lambda a: a\n",
        prelude="import os\nprint(1)\n",
    )
    report = check_kernel_source(source)
    pairs = [(f.rule_id, f.line) for f in report.findings]
    assert pairs == [("kernel-import", 3), ("host-code", 4), ("kernel-attribute", 9), ("kernel-construct", 10)]
    assert len(pairs) == len(set(pairs))


def test_summary_is_one_line():
    report = check_kernel_source(_kernel("f = lambda a: a\n", prelude="import os\nprint(1)\n"))
    text = summary(report)
    assert "\n" not in text
    assert text.startswith("kernel-import: ") and "(line 3)" in text
    assert text.endswith("; also host-code, kernel-construct")


def test_oversized_source_is_refused_before_parsing():
    report = check_kernel_source("x = 1\n" + "#" * (300_000 - 6) + "\n(")
    assert [f.rule_id for f in report.findings] == ["source-size"]
    assert len("#" * 300_000) > MAX_SOURCE_CHARS


def test_syntax_error_is_reported():
    report = check_kernel_source("def f(:\n    pass\n")
    assert [f.rule_id for f in report.findings] == ["syntax"]
    assert report.findings[0].line == 1


def test_list_literals_for_shapes_pass():
    source = """
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, N: tl.constexpr):
    acc = tl.zeros([N], dtype=tl.float32)
    tl.store(y_ptr + tl.arange(0, N), acc + tl.load(x_ptr + tl.arange(0, N)))
"""
    report = check_kernel_source(source)
    assert report.passed, summary(report)


@pytest.mark.parametrize(
    ("constant", "refused"),
    [
        ("SCALE = 2", True),  # the interpreter reads a plain global; Triton on a GPU refuses to compile the kernel
        ("SCALE: tl.constexpr = 2", True),  # an annotation is not an instance: the compiler refuses it too
        ("SCALE = tl.constexpr(2)", False),
    ],
)
def test_a_kernel_reads_a_constant_only_when_it_is_constexpr(constant, refused):
    source = textwrap.dedent(
        f"""
        import triton
        import triton.language as tl

        {constant}


        @triton.jit
        def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE, mask=offs < n)
        """
    )
    assert ("kernel-name" in _rules(source)) == refused
