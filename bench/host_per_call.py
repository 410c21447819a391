"""Host time per call of a candidate at one decode row, and where it goes, in-process.

    python3 bench/host_per_call.py [--variant layernorm]      (CUDA GPU; the judge's sandbox is not involved)

Wall time of 2,000 back-to-back calls at one decode row, synchronised at the end: launch-bound, so this
is the host's cost per call. The candidate (the coder's first config, as the server calls it through the
one binder) is taken apart layer by layer: the binder, the family's wrapper, the bare Triton launch with
the same arguments, and the torch work the wrapper does around it; beside them the module's eager forward
and torch's native op. The judge caps a candidate slower than eager host-inclusive at +1, so this is the
figure that decides whether a kernel can win against a one-launch native op (nn.LayerNorm).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from services.core import kernels  # noqa: E402
from services.ops.recognise_norm import epsilon_of  # noqa: E402
from services.ops.row_reduction import native_op, template  # noqa: E402
from services.ops.row_reduction.contract import derive_contract  # noqa: E402
from services.server.introspection import introspect_module  # noqa: E402

WIDTH = 1536


def host_us(fn, calls: int = 2000) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def module_for(variant: str) -> torch.nn.Module:
    if variant == "layernorm":
        return torch.nn.LayerNorm(WIDTH).cuda().bfloat16()
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

    return Qwen2RMSNorm(WIDTH, eps=1e-6).cuda().bfloat16()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=("rmsnorm", "layernorm"), default="rmsnorm")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench/host_per_call.py needs a CUDA GPU")
        return 2
    torch.set_grad_enabled(False)
    module = module_for(args.variant)
    config = template.search_configs("" if args.variant == "rmsnorm" else args.variant)[0]
    source, plan = template.render(config), template.plan(config)
    entry = kernels.candidate_wrapper(Path(tempfile.mkdtemp()), source, plan)
    contract = derive_contract(introspect_module(module))
    call = kernels.bind(contract, entry)
    x = torch.randn(1, 1, WIDTH, device="cuda", dtype=torch.bfloat16)
    eps = epsilon_of(module)
    bias = {"bias": module.bias} if getattr(module, "bias", None) is not None else {}
    loaded = kernels.load_kernels(kernels.write_source(Path(tempfile.mkdtemp()), source), [plan.launches[0].kernel])
    kernel = loaded[plan.launches[0].kernel]
    launch = plan.launches[0]
    y = torch.empty_like(x)
    x2d, y2d = x.view(-1, WIDTH), y.view(-1, WIDTH)
    values = {"x": x2d, "w": module.weight, "b": bias.get("bias"), "y": y2d, "rows": 1, "eps": eps}
    block = 1 << (WIDTH - 1).bit_length()
    constexprs = {"N_COLS": WIDTH, "BLOCK": block, "ROWS": 1}
    runtime = [values[a] for a in launch.args]
    native = native_op(module, WIDTH, eps)

    def torch_around() -> None:  # what the wrapper does besides the launch
        h = x.reshape(-1, WIDTH).contiguous()
        torch.empty(h.shape, dtype=torch.promote_types(module.weight.dtype, x.dtype), device=h.device)
        module.weight.contiguous()

    # The compiled kernel Triton's launch returned, called again directly: what is left of a launch without
    # Triton's per-call binding, specialisation key and cache lookup (constexprs go in as arguments too).
    compiled = kernel[(1,)](*runtime, **constexprs, num_warps=launch.num_warps)
    everything = runtime + [constexprs[name] for name in kernel.arg_names[len(runtime) :]]
    direct = compiled[(1, 1, 1)]
    figures = {
        "candidate (binder + wrapper + launch)": host_us(lambda: call(module, (x,), {})),
        "wrapper + launch": host_us(lambda: entry(hidden_states=x, weight=module.weight, eps=eps, **bias)),
        "bare triton launch": host_us(lambda: kernel[(1,)](*runtime, **constexprs, num_warps=launch.num_warps)),
        "compiled kernel called directly": host_us(lambda: direct(*everything)),
        "torch work around the launch": host_us(torch_around),
        "eager module": host_us(lambda: module(x)),
        "native op": host_us(lambda: native(x)),
    }
    for name, us in figures.items():
        print(f"{name:>40}: {us:6.1f} us")
    if args.out:
        command = f"python bench/host_per_call.py --variant {args.variant}"
        meta = {"command": command, "gpu": torch.cuda.get_device_name()}
        args.out.write_text(json.dumps({"meta": meta, "host_us": figures}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
