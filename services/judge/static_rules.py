"""The static check's rule table and allow/deny lists, as data (read by services.judge.static_check)."""

from __future__ import annotations

# rule id -> what the rule guards against
RULES: dict[str, str] = {
    "syntax": "the source must parse as Python",
    "source-size": "the source must be a reasonable size for one kernel file",
    "import-not-allowed": "only torch, triton, triton.language, math, typing and __future__ may be imported",
    "module-statement": "module level holds only imports, functions, constant assignments and a docstring",
    "decorator": "only triton.jit/autotune/heuristics and torch.no_grad/inference_mode decorate functions",
    "default-value": "parameter defaults must be constants (they run at import, in the server too)",
    "forbidden-call": "no eval/exec/compile/open/__import__/getattr/setattr/globals/vars and friends",
    "dunder-access": "no dunder attributes or names (__dict__, __globals__, __builtins__, ...)",
    "forbidden-module": "no os/sys/subprocess/threading/socket/ctypes/... reached by any path",
    "torch-computes-op": "torch must not compute the op itself: the Triton kernel does",
    "torch-internals": "no torch/triton internals (torch._C, torch.ops, torch.utils, torch.compile, triton.knobs ...)",
    "patches-library": "no assignment to attributes of torch, triton, math, typing or time",
    "module-alias": "a module may not be rebound to another name (it hides what is called)",
    "global-state": "no module-level state written from functions (global, nonlocal, mutating a module name)",
    "try-except": "no try/except: a kernel that fails must fail loudly",
    "mutates-input": "the entrypoint must not write to its inputs or bound module state",
    "no-jit-kernel": "the source must define a @triton.jit kernel",
    "entrypoint-missing": "the contract's entrypoint must be a plain top-level function",
    "kernel-not-launched": "the entrypoint must launch a @triton.jit kernel as kernel[grid](...)",
}

MAX_SOURCE_CHARS = 200_000

ALLOWED_IMPORTS = frozenset({"torch", "triton", "triton.language", "math", "typing", "__future__"})

ALLOWED_DECORATORS = frozenset(
    {"triton.jit", "triton.autotune", "triton.heuristics", "torch.no_grad", "torch.inference_mode"}
)

FORBIDDEN_CALLS = frozenset(
    {
        "eval", "exec", "compile", "open", "__import__", "getattr", "setattr", "delattr", "hasattr",
        "globals", "locals", "vars", "dir", "breakpoint", "input", "exit", "quit", "help", "memoryview",
        "classmethod", "staticmethod", "property", "super",
    }
)  # fmt: skip

# Reached anywhere in a dotted path (torch.os, typing.sys, ...) or as a bare name.
FORBIDDEN_MODULES = frozenset(
    {
        "os", "sys", "subprocess", "threading", "multiprocessing", "socket", "ctypes", "shutil", "pathlib",
        "importlib", "builtins", "signal", "resource", "inspect", "pickle", "marshal", "io", "gc", "time",
        "asyncio", "urllib", "http", "requests", "tempfile", "glob", "mmap", "pty", "fcntl", "select",
        "selectors", "concurrent", "weakref", "atexit", "code", "codeop", "runpy", "pkgutil", "zipimport",
    }
)  # fmt: skip

# torch.<attr> that computes the op (or a norm) instead of the kernel.
TORCH_COMPUTES_OP = frozenset(
    {
        "nn", "functional", "rms_norm", "layer_norm", "native_layer_norm", "norm", "group_norm",
        "batch_norm", "instance_norm", "linalg", "special", "rsqrt", "sqrt", "pow", "square", "mean",
        "var", "std", "var_mean", "std_mean", "softmax", "log_softmax", "einsum", "matmul", "mm", "bmm",
        "addmm", "baddbmm", "vector_norm", "frobenius_norm", "nuclear_norm", "renorm", "sum", "exp",
        "reciprocal", "mul", "div", "addcmul", "addcdiv", "lerp",
    }
)  # fmt: skip

# Tensor methods that compute the op, forbidden outside @triton.jit functions.
TENSOR_OP_METHODS = frozenset(
    {
        "rsqrt", "rsqrt_", "sqrt", "sqrt_", "pow", "pow_", "square", "mean", "norm", "var", "std", "sum",
        "softmax", "log_softmax", "matmul", "mm", "bmm", "rms_norm", "layer_norm", "exp", "reciprocal",
    }
)  # fmt: skip
# Receivers whose methods of those names are plain scalar maths, not tensor ops.
SCALAR_MATH_ROOTS = frozenset({"math", "triton", "typing"})

TORCH_INTERNALS = frozenset(
    {
        "_C", "ops", "_ops", "library", "hub", "load", "save", "jit", "compile", "compiler", "_dynamo",
        "_inductor", "fx", "utils", "backends", "distributed", "multiprocessing", "set_default_dtype",
        "set_default_device", "set_default_tensor_type", "manual_seed", "seed", "random",
        "use_deterministic_algorithms", "autograd", "overrides", "classes", "package", "export", "testing",
        "set_grad_enabled", "set_num_threads", "profiler", "serialization", "storage", "from_file",
    }
)  # fmt: skip
TRITON_INTERNALS = frozenset({"knobs", "compiler", "tools", "testing", "backends", "runtime", "_C", "profiler"})

# Roots whose attributes must never be assigned (the judge's and server's own clocks and libraries).
PATCH_ROOTS = frozenset({"torch", "triton", "math", "typing", "time"})

# Methods that mutate a container in place (module-level state written from a function).
MUTATING_METHODS = frozenset(
    {"append", "extend", "insert", "update", "setdefault", "pop", "popitem", "clear", "remove", "add", "discard"}
)
