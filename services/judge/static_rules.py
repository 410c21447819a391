"""The static check's rule table and allow/deny lists, as data (read by services.judge.static_check).

A kernel file is kernel → launcher → wrapper and needs very little of Python or torch, so the
lists are mostly allowlists: what a wrapper may call outside the @triton.jit kernel is named
here, and everything else is refused with the rule whose reason fits best.
"""

from __future__ import annotations

# rule id -> what the rule guards against (one line each: it lands in docs/judge.md and the verdict)
RULES: dict[str, str] = {
    "syntax": "the source must parse as Python",
    "source-size": "the source must be a reasonable size for one kernel file",
    "import-not-allowed": "only torch, triton, triton.language, math, typing and __future__ may be imported",
    "module-statement": "module level holds only imports, functions, constant assignments and a docstring",
    "decorator": "only triton.jit/autotune/heuristics and torch.no_grad/inference_mode decorate functions, no hooks",
    "default-value": "parameter defaults must be immutable constants (a mutable default is a cache across calls)",
    "forbidden-call": "only a short list of builtins may be called (no eval/exec/open/getattr/print/type ...)",
    "dunder-access": "no dunder attributes or names (__dict__, __globals__, __builtins__, ...)",
    "forbidden-module": "no os/sys/subprocess/threading/socket/ctypes/... reached by any path",
    "torch-computes-op": "torch must not compute the op itself (torch.nn, F.*, rms_norm, tensor maths)",
    "torch-not-allowed": "outside the kernel only torch allocation, dtypes and type promotion may be used",
    "method-not-allowed": "outside the kernel only shape and layout methods may be called on tensors",
    "host-arithmetic": "no tensor arithmetic outside the kernel (operators compute the op as surely as torch calls)",
    "torch-internals": "no torch/triton internals (torch._C, torch.ops, torch.compile, triton.testing, private names)",
    "stream-trick": "no streams, events, graphs, synchronisation or non_blocking copies: timing must see all work",
    "inline-asm": "no inline assembly or device-specific extras inside a kernel (clocks, timers, raw PTX)",
    "patches-library": "no assignment to, or mutation of, attributes of torch, triton, math, typing or time",
    "module-alias": "a module may not be rebound to another name (it hides what is called)",
    "global-state": "no state that outlives a call (module-level mutables, function attributes, global/nonlocal)",
    "tensor-subclass": "no tensor subclasses or lazy wrappers: the output must be a plain tensor",
    "try-except": "no try/except: a kernel that fails must fail loudly, not fall back",
    "judge-files": "no paths to the judge's files, /proc, /etc or anything outside the kernel file",
    "mutates-input": "the entrypoint must not write to its inputs or bound module state",
    "no-jit-kernel": "the source must define a @triton.jit kernel",
    "entrypoint-missing": "the contract's entrypoint must be a plain top-level function",
    "kernel-not-launched": "the entrypoint must launch a @triton.jit kernel as kernel[grid](...)",
    "decoy-kernel": "every launched kernel must store, and the entrypoint must return what a kernel wrote",
    "returns-input": "the entrypoint must not return its input (or a view or cast of it)",
    "output-not-written": "the entrypoint must not return an allocation no kernel launch was given, or a constant",
}

MAX_SOURCE_CHARS = 200_000

ALLOWED_IMPORTS = frozenset({"torch", "triton", "triton.language", "math", "typing", "__future__"})

ALLOWED_DECORATORS = frozenset(
    {"triton.jit", "triton.autotune", "triton.heuristics", "torch.no_grad", "torch.inference_mode"}
)
# Keyword arguments of triton.autotune/jit that run arbitrary code or replace the benchmark.
DECORATOR_HOOKS = frozenset(
    {"pre_hook", "post_hook", "prune_configs_by", "early_config_prune", "perf_model", "do_bench", "reset_to_zero",
     "restore_value", "repr", "launch_metadata"}
)  # fmt: skip

# Builtins a wrapper may call: checks, conversions and error messages. Anything else is refused.
ALLOWED_BUILTINS = frozenset(
    {
        "isinstance", "float", "int", "bool", "len", "tuple", "range", "min", "max", "str", "abs",
        "TypeError", "ValueError", "RuntimeError", "NotImplementedError", "AssertionError",
    }
)  # fmt: skip
# Named outright so the reason is specific (they would be refused as not allowed anyway).
FORBIDDEN_CALLS = frozenset(
    {
        "eval", "exec", "compile", "open", "__import__", "getattr", "setattr", "delattr", "hasattr",
        "globals", "locals", "vars", "dir", "breakpoint", "input", "exit", "quit", "help", "memoryview",
        "classmethod", "staticmethod", "property", "super", "type", "object", "print", "id", "iter", "next",
    }
)  # fmt: skip

# Reached anywhere in a dotted path (torch.os, typing.sys, ...) or as a bare name.
FORBIDDEN_MODULES = frozenset(
    {
        "os", "sys", "subprocess", "threading", "multiprocessing", "socket", "ctypes", "shutil", "pathlib",
        "importlib", "builtins", "signal", "resource", "inspect", "pickle", "marshal", "io", "gc", "time",
        "asyncio", "urllib", "http", "requests", "tempfile", "glob", "mmap", "pty", "fcntl", "select",
        "selectors", "concurrent", "weakref", "atexit", "code", "codeop", "runpy", "pkgutil", "zipimport",
        "functools", "operator", "copyreg", "linecache", "traceback", "platform", "sysconfig", "site",
    }
)  # fmt: skip

# torch.<attr> that computes the op (or a norm) instead of the kernel.
TORCH_COMPUTES_OP = frozenset(
    {
        "nn", "functional", "rms_norm", "layer_norm", "native_layer_norm", "norm", "group_norm",
        "batch_norm", "instance_norm", "linalg", "special", "rsqrt", "sqrt", "pow", "square", "mean",
        "var", "std", "var_mean", "std_mean", "softmax", "log_softmax", "einsum", "matmul", "mm", "bmm",
        "addmm", "baddbmm", "vector_norm", "frobenius_norm", "nuclear_norm", "renorm", "sum", "exp",
        "reciprocal", "mul", "div", "addcmul", "addcdiv", "lerp", "where", "add", "sub", "multiply",
        "divide", "true_divide", "clamp", "abs", "neg", "tensordot", "inner", "outer", "dot", "cumsum",
        "prod", "logsumexp", "nansum", "nanmean", "tanh", "sigmoid", "cat", "stack",
    }
)  # fmt: skip

# torch.<attr> a wrapper may use: allocation, dtypes, promotion and type checks.
TORCH_ALLOWED = frozenset(
    {
        "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "promote_types", "result_type",
        "device", "dtype", "Tensor", "Size", "is_tensor", "is_floating_point", "finfo", "iinfo",
        "no_grad", "inference_mode", "float32", "float16", "bfloat16", "float64", "float", "half",
        "double", "int8", "int16", "int32", "int64", "uint8", "long", "int", "bool",
    }
)  # fmt: skip

TORCH_INTERNALS = frozenset(
    {
        "_C", "ops", "_ops", "library", "hub", "load", "save", "jit", "compile", "compiler", "_dynamo",
        "_inductor", "fx", "utils", "backends", "distributed", "multiprocessing", "set_default_dtype",
        "set_default_device", "set_default_tensor_type", "manual_seed", "seed", "random",
        "use_deterministic_algorithms", "autograd", "overrides", "classes", "package", "export", "testing",
        "set_grad_enabled", "set_num_threads", "profiler", "serialization", "storage", "from_file",
        "get_rng_state", "set_rng_state", "default_generator", "Generator", "set_flush_denormal",
    }
)  # fmt: skip
# torch.<attr> that reaches streams, events, graphs or device synchronisation.
TORCH_STREAMS = frozenset(
    {"cuda", "mps", "xpu", "Stream", "Event", "accelerator", "cpu", "mtia", "graph", "CUDAGraph", "synchronize"}
)
TRITON_INTERNALS = frozenset({"knobs", "compiler", "tools", "testing", "backends", "runtime", "_C", "profiler"})
# Inside a kernel: things that read clocks or run raw assembly.
TRITON_ESCAPES = frozenset({"inline_asm_elementwise", "extra", "clock", "globaltimer", "smid"})

# Roots whose attributes must never be assigned or mutated (the judge's and server's libraries and clocks).
PATCH_ROOTS = frozenset({"torch", "triton", "math", "typing", "time"})

# Methods that mutate a container in place.
MUTATING_METHODS = frozenset(
    {
        "append", "extend", "insert", "update", "setdefault", "pop", "popitem", "clear", "remove", "add",
        "discard", "difference_update", "intersection_update", "symmetric_difference_update", "sort", "reverse",
    }
)  # fmt: skip

# Tensor methods that compute the op: named so the reason is specific (method-not-allowed covers the rest).
TENSOR_OP_METHODS = frozenset(
    {
        "rsqrt", "rsqrt_", "sqrt", "sqrt_", "pow", "pow_", "square", "mean", "norm", "var", "std", "sum",
        "softmax", "log_softmax", "matmul", "mm", "bmm", "rms_norm", "layer_norm", "exp", "reciprocal", "mul",
        "mul_", "div", "div_", "add", "add_", "sub", "sub_", "addcmul", "lerp", "clamp", "abs", "neg",
    }
)  # fmt: skip
# Methods a wrapper may call on a tensor (or on its shape/dtype): shape and layout, nothing that computes.
ALLOWED_METHODS = frozenset(
    {
        "reshape", "view", "view_as", "contiguous", "stride", "size", "numel", "dim", "ndimension",
        "element_size", "is_contiguous", "is_floating_point", "to", "flatten", "unsqueeze", "squeeze",
        "data_ptr", "get_device", "new_empty", "new_zeros", "float", "join",
    }
)  # fmt: skip
# Methods that build a tensor subclass or wrap a tensor lazily.
SUBCLASS_METHODS = frozenset({"as_subclass", "_make_subclass", "_make_wrapper_subclass"})
# Receivers whose methods are plain scalar maths or module functions, not tensor ops.
SCALAR_MATH_ROOTS = frozenset({"math", "triton", "typing"})

# Keywords that ask for asynchronous work the timing would not see.
STREAM_KEYWORDS = frozenset({"non_blocking", "stream"})

# Substrings of string constants that point at files a kernel has no business with.
SUSPECT_PATHS = (
    "/proc", "/etc/", "/home", "/root", "/dev/", "/tmp", "../", "~/", ".yantra", "services/judge", "result.json",
    "job.json", "sandbox", "environ", ".ssh", ".env", "site-packages",
)  # fmt: skip
