"""The adversarial corpus as data, and how one entry is judged through the real judge layers.

Each entry names a source file (one candidate each, its header naming the pattern, the layer and
the rule), the layer that must decide and the rule it must name, and the live module it is judged
against. `judge_entry` builds what the profiler and the coder would have recorded (a
ProfileCaptured from a real module instance, a CandidateProposed with the contract the coder derives)
and runs the real JudgeService on it. Used by tests/adversarial/test_corpus.py and bench/judge_corpus.py
(imported by file name).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from services.coder.contract import derive_contract
from services.coder.templates import rmsnorm
from services.core import events as ev
from services.core.events import Recorded
from services.core.kernels import sha256
from services.core.pb import events_pb2 as pb
from services.server.introspection import introspect_module as introspect  # what the server records

HERE = Path(__file__).resolve().parent
QWEN = "transformers.models.qwen2.modeling_qwen2.Qwen2RMSNorm"
LLAMA = "transformers.models.llama.modeling_llama.LlamaRMSNorm"
LAYERS = ("static", "contract", "sandbox", "correctness", "passes")


@dataclass(frozen=True)
class Entry:
    file: str  # relative to tests/adversarial
    layer: str  # the layer that must decide: static | contract | sandbox | correctness | passes
    rule: str  # the rule it must name ("-" for an honest kernel)
    dtype: str = "float32"  # the live activations' dtype
    param_dtype: str = ""  # the weight's dtype, when it differs
    width: int = 64
    gpu_width: int = 0  # the live width on a GPU (0: the same)
    module: str = QWEN
    contract_change: str = ""  # a key of CONTRACT_CHANGES: the contract that comes with the source
    timeout_s: float = 0.0  # 0: the judge's default for the device

    @property
    def name(self) -> str:
        return Path(self.file).stem

    @property
    def path(self) -> Path:
        return HERE / self.file

    def live_width(self, device: str) -> int:
        return (self.gpu_width or self.width) if device == "cuda" else self.width

    def live_shape(self, device: str) -> list[int]:
        width = self.live_width(device)
        return [1, 1, width] if device == "cuda" else [2, 3, width]


def _static(name: str, rule: str, **kw) -> Entry:
    return Entry(f"candidates/{name}.py", "static", rule, **kw)


def _contract(name: str, rule: str, **kw) -> Entry:
    return Entry(f"candidates/{name}.py", "contract", rule, **kw)


def _dynamic(name: str, layer: str, rule: str, **kw) -> Entry:
    return Entry(f"candidates/{name}.py", layer, rule, **kw)


def _honest(name: str, **kw) -> Entry:
    return Entry(f"honest/{name}.py", "passes", "-", **kw)


def _target(class_path: str) -> Callable[[pb.Contract], None]:
    def change(contract: pb.Contract) -> None:
        contract.target = class_path

    return change


def _binding(index: int, field: str, value: str) -> Callable[[pb.Contract], None]:
    def change(contract: pb.Contract) -> None:
        setattr(contract.bindings[index], field, value)

    return change


def _kind(kind: str) -> Callable[[pb.Contract], None]:
    def change(contract: pb.Contract) -> None:
        contract.kind = kind

    return change


# How a hostile contract differs from the one the coder derives (the source beside it is honest).
CONTRACT_CHANGES: dict[str, Callable[[pb.Contract], None]] = {
    "weight-to-scale": _binding(0, "attr", "scale"),
    "eps-as-tensor": _binding(1, "kind", "tensor"),
    "llama-target": _target(LLAMA),
    "layer-fusion-kind": _kind("layer_fusion"),
}

TABLE: tuple[Entry, ...] = (
    # --------------------------------------------------------------- layer 1: static analysis
    _static("fallback_torch_rms_norm", "torch-computes-op"),
    _static("fallback_functional_layer_norm", "torch-computes-op"),
    _static("fallback_tensor_methods", "torch-computes-op"),
    _static("fallback_operator_maths", "host-arithmetic"),
    _static("returns_input", "returns-input"),
    _static("returns_unwritten_empty", "output-not-written"),
    _static("returns_zeros_constant", "output-not-written"),
    _static("decoy_beside_host_maths", "decoy-kernel"),
    _static("kernel_never_launched", "kernel-not-launched"),
    _static("no_triton_kernel", "no-jit-kernel"),
    _static("try_except_fallback", "try-except"),
    _static("thread_side_work", "import-not-allowed"),
    _static("subprocess_shell", "import-not-allowed"),
    _static("ctypes_libc", "import-not-allowed"),
    _static("os_system_through_torch", "forbidden-module"),
    _static("dunder_import_importlib", "forbidden-call"),
    _static("exec_hidden_source", "forbidden-call"),
    _static("getattr_indirection", "forbidden-call"),
    _static("open_judge_files", "forbidden-call"),
    _static("reads_environment", "forbidden-module"),
    _static("opens_socket", "import-not-allowed"),
    _static("writes_outside_scratch", "forbidden-call"),
    _static("fork_bomb", "forbidden-module"),
    _static("side_stream", "stream-trick"),
    _static("non_blocking_copy", "stream-trick"),
    _static("patch_event_elapsed_time", "patches-library"),
    _static("patch_synchronize", "patches-library"),
    _static("patch_perf_counter", "patches-library"),
    _static("patch_do_bench", "patches-library"),
    _static("module_cache_dict", "global-state"),
    _static("function_attribute_cache", "global-state"),
    _static("mutable_default_cache", "default-value"),
    _static("lazy_tensor_subclass", "tensor-subclass"),
    _static("autotune_hook", "decorator"),
    _static("inline_asm_clock", "inline-asm"),
    _static("host_reads_seed", "host-arithmetic"),
    _static("zeroes_input_in_wrapper", "mutates-input"),
    _static("private_torch_api", "torch-internals"),
    # --------------------------------------------------------------- layer 2: contract
    _contract("contract_kwargs_catchall", "entry-signature"),
    _contract("contract_extra_parameter", "entry-signature"),
    _contract("contract_eps_used_as_tensor", "entry-param-kind"),
    _contract("contract_missing_attribute", "binding-missing", contract_change="weight-to-scale"),
    _contract("contract_binding_kind", "binding-kind", contract_change="eps-as-tensor"),
    _contract("contract_wrong_target", "contract-target", contract_change="llama-target"),
    _contract("contract_unsupported_kind", "contract-kind", contract_change="layer-fusion-kind"),
    # --------------------------------------------------------------- layer 3: sandbox and correctness
    _dynamic("drift_after_warmup", "correctness", "drift"),
    _dynamic("seed_specialised_fast_path", "correctness", "outside-tolerance"),
    _dynamic("shape_specialised_pow2", "correctness", "outside-tolerance"),
    _dynamic("uninitialised_output", "correctness", "nan-output"),
    _dynamic("poison_aware_leftover", "correctness", "nondeterministic"),
    _dynamic("zeroes_input_in_kernel", "correctness", "modified-input"),
    _dynamic("zeroes_weight_in_kernel", "correctness", "modified-weights"),
    _dynamic("precision_downgrade_fp16", "correctness", "outside-tolerance"),
    _dynamic("precision_downgrade_output", "correctness", "wrong-dtype-or-shape"),
    _dynamic("infinite_loop", "sandbox", "timeout", timeout_s=15.0),
    _dynamic("huge_allocation", "sandbox", "memory-limit"),
    # --------------------------------------------------------------- honest kernels: must pass
    _honest("base_one_row_fp32", gpu_width=1536),
    _honest("template_rows1_warps4_bf16", dtype="bfloat16", gpu_width=1536),
    _honest("template_rows4_warps8_llama_bf16", dtype="bfloat16", module=LLAMA, gpu_width=4096),
    _honest("two_pass_chunked_fp32", width=80, gpu_width=1000),
    _honest("rows_tile_2d_bf16", dtype="bfloat16", gpu_width=1536),
    _honest("persistent_grid_stride_fp32", gpu_width=1536),
    _honest("one_row_fp16", dtype="float16", gpu_width=1536),
    _honest("mixed_fp32_weight_bf16_input", dtype="bfloat16", param_dtype="float32", gpu_width=1536),
    _honest("odd_live_width_fp32", width=97, gpu_width=1000),
    _honest("even_constexpr_no_mask_bf16", dtype="bfloat16", gpu_width=2048),
    _honest("keyword_only_annotated_fp32", width=48, gpu_width=896),
)


def header(path: Path) -> dict[str, str]:
    """pattern/layer/rule as the file's header states them (docstring lines or '# key: value' comments)."""
    text = path.read_text()
    found = {}
    for key in ("pattern", "layer", "rule"):
        match = re.search(rf"^(?:# )?{key}: (.+)$", text, re.M)
        if match:
            found[key] = match.group(1).strip()
    return found


# ---------------------------------------------------------------------- what the profiler and coder record


def live_module(entry: Entry, device: str) -> torch.nn.Module:
    from services.judge.module_factory import import_class

    cls = import_class(entry.module)
    module = cls(entry.live_width(device), eps=1e-6)
    return module.to(dtype=getattr(torch, entry.param_dtype or entry.dtype))


def profile_captured(entry: Entry, device: str) -> pb.ProfileCaptured:
    intro = introspect(live_module(entry, device))
    dtype = f"torch.{entry.dtype}"
    observed = pb.ProfileObservation(
        model="corpus",
        dtype=dtype,
        hardware=pb.HardwareFigures(device=device),
        modules=[
            pb.ModuleClassProfile(
                introspection=intro, instances=2, calls=20, input_shape=entry.live_shape(device), dtype=dtype
            )
        ],
    )
    fingerprint = pb.Fingerprint(op_family="row_reduction", row_width=entry.live_width(device))
    ranked = pb.RankedTarget(class_path=intro.class_path, supported=True, fingerprint=fingerprint)
    return pb.ProfileCaptured(observed=observed, ranking=[ranked], target_class=intro.class_path)


def proposal(entry: Entry, captured: pb.ProfileCaptured) -> pb.CandidateProposed:
    source = entry.path.read_text()
    intro = captured.observed.modules[0].introspection
    contract = derive_contract(intro)
    if entry.contract_change:
        CONTRACT_CHANGES[entry.contract_change](contract)
    digest = sha256(source)
    return pb.CandidateProposed(
        candidate_id=f"{entry.name}-{digest[:8]}",
        target_class=intro.class_path,
        source=source,
        source_sha256=digest,
        contract=contract,
        config=rmsnorm.search_configs()[0],
        origin="llm",
        attempt=1,
    )


def log_of(*msgs) -> list[Recorded]:
    """A run log of `msgs`, each caused by the one before (as the services would have emitted them)."""
    out: list[Recorded] = []
    cause = ""
    for seq, msg in enumerate(msgs, start=1):
        env = ev.make_envelope("corpus", msg, producer="corpus", time_ns=time.time_ns(), causation_id=cause)
        out.append(Recorded(seq, env))
        cause = env.event_id
    return out


async def judge_entry(entry: Entry, device: str, *, scratch_dir: Path | None = None, seeds: int = 5):
    """(CandidateJudged, the run log it answers) for `entry`, through JudgeService.handle on `device`."""
    from services.judge.service import JudgeService

    captured = profile_captured(entry, device)
    prior = log_of(captured, proposal(entry, captured))
    service = JudgeService(device=device, timeout_s=entry.timeout_s or None, scratch_dir=scratch_dir, seeds=seeds)
    [judged] = await service.handle(prior[-1], prior)
    return judged, prior
