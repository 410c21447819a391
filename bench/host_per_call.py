"""Host time per call of the template kernel, eager Qwen2RMSNorm, F.rms_norm and torch.compile, in-process.

    python3 bench/host_per_call.py        (CUDA GPU; the judge's sandbox is not involved)

Wall time of 2,000 back-to-back calls at one decode row, synchronised at the end: launch-bound, so this
is the host's cost per call. Printed plain, after torch.compile ran, and with a sys.addaudithook hook
installed (the judge's audit wall is one), with the audit events the calls raise.
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "adversarial")]

import adversarial_corpus as corpus  # noqa: E402
import torch  # noqa: E402

from services.core import kernels  # noqa: E402

NAME = "template_rows1_warps4_bf16"


def host_us(fn, x, calls: int = 2000) -> float:
    for _ in range(20):
        fn(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> int:
    entry = next(e for e in corpus.TABLE if e.name == NAME)
    module = corpus.live_module(entry, "cuda").cuda()
    proposal = corpus.proposal(entry, corpus.profile_captured(entry, "cuda"))
    path = kernels.write_source(Path("/tmp/host-per-call"), proposal.source)
    entrypoint = kernels.load_entrypoint(path, proposal.contract.entrypoint)
    candidate = kernels.bound_forward(module, entrypoint, proposal.contract)
    width = module.weight.shape[0]
    x = torch.randn(1, 1, width, device="cuda", dtype=torch.bfloat16)

    def native(t):
        return torch.nn.functional.rms_norm(t, (width,), module.weight, 1e-6)

    fns = {"candidate": candidate, "eager": module, "native": native}
    torch.set_grad_enabled(False)
    print("plain", {k: round(host_us(f, x), 1) for k, f in fns.items()}, flush=True)
    compiled = torch.compile(module, dynamic=False)
    compiled(x)
    fns["compile"] = compiled
    print("after compile", {k: round(host_us(f, x), 1) for k, f in fns.items()}, flush=True)
    events, counting = collections.Counter(), [True]

    def hook(event, args):
        if counting[0]:
            events[event] += 1

    sys.addaudithook(hook)
    for f in fns.values():
        for _ in range(10):
            f(x)
    counting[0] = False
    print("audit events per 40 calls", events.most_common(12), flush=True)
    print("with hook", {k: round(host_us(f, x), 1) for k, f in fns.items()}, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
