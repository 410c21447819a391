"""The adversarial corpus as data, and how one entry is judged through the real judge layers.

A candidate is data: @triton.jit kernel source plus a LaunchPlan (services.ops.row_reduction checks
it; the family's wrapper is the only Python that runs). Each entry names a source file (one
candidate each, its header naming the pattern, the layer and the rule; its plan on a `# plan: {json}`
line, tests/candidate_files.py) or a config of the shipped template (rendered at run time), the layer
that must decide and the rule it must name, and the live module it is judged against.

Two generations of hostile files live side by side. The old ones (host code: a wrapper function,
imports of torch/os/ctypes, patches, caches) are kept as they were written and submitted with the
shipped template's first plan, as an attacker must send a plan too: the kernel schema refuses each
before anything loads. The new ones are kernel-only sources whose trick lives where the schema
cannot see it (a kernel body, a plan, a contract): the later layers must catch them.

`judge_entry` builds what the profiler and the coder would have recorded (a ProfileCaptured from a
real module instance, a CandidateProposed with the contract the coder derives and the plan) and runs
the real JudgeService on it. Used by tests/adversarial/test_corpus.py and bench/judge_corpus.py
(imported by file name; tests/ must be on sys.path for tests/candidate_files.py).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from candidate_files import plan_of

from services.core import events as ev
from services.core.events import Recorded
from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.ops import row_reduction
from services.ops.row_reduction import template as rmsnorm
from services.ops.row_reduction.contract import derive_contract
from services.server.introspection import introspect_module as introspect  # what the server records
from services.server.live_parameters import CLASS_BUDGET_BYTES
from services.server.live_parameters import record as record_live

HERE = Path(__file__).resolve().parent
QWEN = "transformers.models.qwen2.modeling_qwen2.Qwen2RMSNorm"
LLAMA = "transformers.models.llama.modeling_llama.LlamaRMSNorm"
COHERE = "transformers.models.cohere.modeling_cohere.CohereLayerNorm"  # a LayerNorm without bias
LAYERS = ("static", "contract", "sandbox", "correctness", "passes")
DTYPE_TAGS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
_PLAN_LINE = re.compile(r"^# plan: ", re.M)


def template_plan() -> pb.LaunchPlan:
    """The plan an old (host-code) candidate is submitted with: the shipped template's first."""
    return rmsnorm.plan(rmsnorm.search_configs()[0])


@dataclass(frozen=True)
class Entry:
    file: str  # relative to tests/adversarial; "" for an entry of the shipped template (see `template`)
    layer: str  # the layer that must decide: static | contract | sandbox | correctness | passes
    rule: str  # the rule it must name ("-" for an honest kernel); static: the first finding's rule
    dtype: str = "float32"  # the live activations' dtype
    param_dtype: str = ""  # the weight's dtype, when it differs
    width: int = 64
    gpu_width: int = 0  # the live width on a GPU (0: the same)
    module: str = QWEN
    contract_change: str = ""  # a key of CONTRACT_CHANGES: the contract that comes with the source
    timeout_s: float = 0.0  # 0: the judge's default for the device
    template: tuple[int, int] = ()  # (num_warps, rows_per_program): the shipped template at that config
    also: tuple[str, ...] = ()  # static: rules that must fire too (the one the trick is about, when not first)
    widths: tuple[int, ...] = ()  # other widths the profile saw the class called at (ModuleClassProfile.widths)
    # (layer, rule) on a CPU where it differs: there every tensor ends at an inaccessible page (services.judge.fence),
    # so a write just past an output faults the child before its guard bytes are read
    cpu_verdict: tuple[str, str] = ()

    @property
    def name(self) -> str:
        if self.template:
            warps, rows = self.template
            llama = "_llama" if self.module == LLAMA else ""
            return f"template_rows{rows}_warps{warps}{llama}_{DTYPE_TAGS[self.dtype]}"
        return Path(self.file).stem

    @property
    def path(self) -> Path | None:
        return HERE / self.file if self.file else None

    def config(self) -> pb.TemplateConfig:
        if not self.template:
            return rmsnorm.search_configs()[0]
        warps, rows = self.template
        return pb.TemplateConfig(template=rmsnorm.TEMPLATE, num_warps=warps, rows_per_program=rows)

    def candidate(self) -> tuple[str, pb.LaunchPlan]:
        """(kernel source, launch plan): the template's at its config, else the file's with its `# plan:`
        line (an old host-code file has none: it goes with the template's first plan)."""
        if self.template:
            return rmsnorm.render(self.config()), rmsnorm.plan(self.config())
        source = self.path.read_text()
        return source, plan_of(source) if _PLAN_LINE.search(source) else template_plan()

    def expected(self, device: str) -> tuple[str, str]:
        """(layer, rule) the judge on `device` ("cpu" | "cuda") must decide with."""
        return self.cpu_verdict if device == "cpu" and self.cpu_verdict else (self.layer, self.rule)

    def live_width(self, device: str) -> int:
        return (self.gpu_width or self.width) if device == "cuda" else self.width

    def live_shape(self, device: str) -> list[int]:
        width = self.live_width(device)
        return [1, 1, width] if device == "cuda" else [2, 3, width]


def _old(name: str, *also: str, rule: str = "kernel-import") -> Entry:
    """An old host-code candidate (kept as written), refused by the kernel schema with the template's plan.

    Every one imports torch (or os, ctypes, ...) before anything else, so kernel-import comes first;
    `also` names the rules its trick itself trips (host-code for its wrapper, at least).
    """
    return Entry(f"candidates/{name}.py", "static", rule, also=("host-code", *also))


def _static(name: str, rule: str, **kw) -> Entry:
    return Entry(f"candidates/{name}.py", "static", rule, **kw)


def _contract(name: str, rule: str, change: str, **kw) -> Entry:
    return Entry(f"candidates/{name}.py", "contract", rule, contract_change=change, **kw)


def _dynamic(name: str, layer: str, rule: str, **kw) -> Entry:
    return Entry(f"candidates/{name}.py", layer, rule, **kw)


def _honest(name: str, **kw) -> Entry:
    return Entry(f"honest/{name}.py", "passes", "-", **kw)


def _template(warps: int, rows: int, **kw) -> Entry:
    return Entry("", "passes", "-", template=(warps, rows), **kw)


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


def _swap_bindings(contract: pb.Contract) -> None:
    weight, eps = contract.bindings
    (weight.attr, weight.kind), (eps.attr, eps.kind) = (eps.attr, eps.kind), (weight.attr, weight.kind)


def _entrypoint(name: str) -> Callable[[pb.Contract], None]:
    def change(contract: pb.Contract) -> None:
        contract.entrypoint = name

    return change


def _extra_input(name: str) -> Callable[[pb.Contract], None]:
    def change(contract: pb.Contract) -> None:
        contract.inputs.append(name)

    return change


# How a hostile contract differs from the one the coder derives (the kernel and plan beside it are honest).
CONTRACT_CHANGES: dict[str, Callable[[pb.Contract], None]] = {
    "weight-to-scale": _binding(0, "attr", "scale"),
    "eps-as-tensor": _binding(1, "kind", "tensor"),
    "swap-weight-and-eps": _swap_bindings,
    "own-entrypoint": _entrypoint("rmsnorm_forward"),
    "residual-input": _extra_input("residual"),
    "llama-target": _target(LLAMA),
    "layer-fusion-kind": _kind("layer_fusion"),
}

TABLE: tuple[Entry, ...] = (
    # ------------------------------------------------ layer 1: static, the old corpus (host code, template plan)
    _old("fallback_torch_rms_norm"),
    _old("fallback_functional_layer_norm"),
    _old("fallback_tensor_methods"),
    _old("fallback_operator_maths"),
    _old("returns_input"),
    _old("returns_unwritten_empty"),
    _old("returns_zeros_constant"),
    _old("decoy_beside_host_maths"),
    _old("kernel_never_launched"),
    _old("no_triton_kernel", "no-jit-kernel"),
    _old("try_except_fallback"),
    _old("thread_side_work"),
    _old("subprocess_shell"),
    _old("ctypes_libc"),
    _old("os_system_through_torch"),
    _old("dunder_import_importlib"),
    _old("exec_hidden_source"),
    _old("getattr_indirection"),
    _old("open_judge_files"),
    _old("reads_environment"),
    _old("opens_socket"),
    _old("writes_outside_scratch"),
    _old("fork_bomb"),
    _old("side_stream"),
    _old("non_blocking_copy"),
    _old("patch_event_elapsed_time"),
    _old("patch_synchronize"),
    _old("patch_perf_counter"),
    _old("patch_do_bench"),
    _old("module_cache_dict"),
    _old("function_attribute_cache"),
    _old("mutable_default_cache"),
    _old("lazy_tensor_subclass"),
    _old("autotune_hook", "kernel-decorator"),
    _old("inline_asm_clock", "inline-asm"),
    _old("host_reads_seed"),
    _old("zeroes_input_in_wrapper"),
    _old("private_torch_api"),
    _old("contract_kwargs_catchall"),
    _old("contract_extra_parameter"),
    _old("contract_eps_used_as_tensor"),
    _old("contract_missing_attribute"),
    _old("contract_binding_kind"),
    _old("contract_wrong_target"),
    _old("contract_unsupported_kind"),
    _old("drift_after_warmup"),
    _old("seed_specialised_fast_path"),
    _old("shape_specialised_pow2"),
    _old("uninitialised_output"),
    _old("poison_aware_leftover"),
    _old("zeroes_input_in_kernel"),
    _old("zeroes_weight_in_kernel"),
    _old("precision_downgrade_fp16"),
    _old("precision_downgrade_output"),
    _old("infinite_loop"),
    _old("huge_allocation"),
    # ------------------------------------------------ layer 1: static, kernel-only sources (schema and plan holes)
    _static("schema_heuristics_host_lambda", "kernel-decorator"),
    _static("schema_subscript_callee", "kernel-call"),
    _static("schema_call_result_callee", "kernel-call"),
    _static("schema_plain_constant_in_kernel", "kernel-name"),  # the interpreter reads it; a GPU's compiler refuses
    _static("schema_dunder_class_walk", "kernel-attribute"),
    _static("schema_frame_walk", "kernel-attribute"),
    _static("schema_dunder_import_name", "kernel-name"),
    _static("schema_handle_data_tofile", "kernel-attribute"),
    _static("schema_atomic_call_counter", "kernel-attribute"),
    _static("schema_host_function", "host-code"),
    _static("schema_inline_asm_globaltimer", "inline-asm"),
    _static("schema_device_clock", "inline-asm"),
    _static("schema_default_runs_host_code", "kernel-parameter"),
    _static("schema_try_except_in_kernel", "kernel-construct"),
    _static("schema_no_jit_kernel", "no-jit-kernel"),
    _static("schema_no_plan", "candidate-format"),
    _static("plan_arg_outside_vocabulary", "launch-plan"),
    _static("plan_grid_outside_vocabulary", "launch-plan"),
    _static("plan_constexpr_expression", "launch-plan"),
    _static("plan_no_catch_all", "launch-plan"),
    # ------------------------------------------------ layer 1: the dataflow check (values flowing where they may not)
    _static("kernel_zeroes_input", "writes-input"),
    _static("kernel_zeroes_weight", "writes-input"),
    _static("kernel_poison_aware_leftover", "reads-output", also=("value-branch",)),
    _static("kernel_seed_specialised", "value-branch"),
    _static("kernel_drift_after_warmup", "value-branch", also=("writes-input",)),
    _static("kernel_infinite_loop", "unbounded-loop"),
    _static("regime_nan_swallowed", "value-branch"),
    _static("guard_store_before_input_start", "writes-input"),
    _static("canary_aware_reads_guards", "value-bits", also=("reads-output", "value-branch")),
    _static("flow_branch_on_scale_band", "value-branch"),
    _static("flow_where_band", "value-branch"),
    _static("flow_output_as_cache", "reads-output"),
    _static("flow_pointer_as_int", "pointer-origin"),
    _static("flow_address_from_data", "value-bits", also=("value-address",)),  # data made an int, then an address
    _static("flow_loop_bound_from_data", "value-bits", also=("value-branch",)),  # data made an int, then a bound
    _static("flow_zero_step_loop", "unbounded-loop"),
    _static("regime_first_rows_only", "hidden-boundary"),
    # ------------------------------------------------ layer 2: contract (honest kernel and plan, hostile contract)
    _contract("kernel_contract_missing_attribute", "binding-missing", "weight-to-scale"),
    _contract("kernel_contract_binding_kind", "binding-kind", "eps-as-tensor"),
    _contract("kernel_contract_swapped_bindings", "entry-param-kind", "swap-weight-and-eps"),
    _contract("kernel_contract_wrong_entrypoint", "entry-signature", "own-entrypoint"),
    _contract("kernel_contract_extra_input", "contract-inputs", "residual-input"),
    _contract("kernel_contract_wrong_target", "contract-target", "llama-target"),
    _contract("kernel_contract_unsupported_kind", "contract-kind", "layer-fusion-kind"),
    # ------------------------------------------------ layer 3: sandbox and correctness (kernel-only sources)
    _static("kernel_uninitialised_output", "row-local"),  # its unmasked store writes past the row (then nan-output)
    _dynamic("kernel_shape_specialised_pow2", "correctness", "outside-tolerance"),
    _dynamic("kernel_even_widths_only", "correctness", "raised"),
    _dynamic("kernel_precision_downgrade_fp16", "correctness", "outside-tolerance"),
    _dynamic("kernel_precision_downgrade_output", "correctness", "outside-tolerance"),
    _dynamic("sandbox_huge_bounded_loop", "sandbox", "timeout", timeout_s=15.0),
    _dynamic("sandbox_slow_call_per_bytes", "sandbox", "timeout"),  # the per-call limit, not the whole timeout
    _dynamic("regime_square_in_fp16", "correctness", "outside-tolerance", dtype="float16"),
    _dynamic("regime_rsqrt_without_eps", "correctness", "nan-output", dtype="float16"),
    _dynamic("regime_weight_as_one", "correctness", "outside-tolerance"),
    _dynamic("regime_grid_under_covers", "correctness", "nan-output"),
    _dynamic("memory_overread_unmasked", "sandbox", "memory-fault"),  # a read past a tensor: the CPU fence
    _dynamic("memory_underread_before_start", "sandbox", "memory-fault"),  # a read before one: the fence at its start
    _dynamic("memory_wild_read_far", "sandbox", "memory-fault"),  # a read far past one: the 8 MiB zones
    # a read past a tensor in the launch past a 4,096-row dispatch: the fenced pass lowers the limit (a CPU refuses it)
    _dynamic(
        "memory_overread_past_dispatch", "sandbox", "memory-fault", cpu_verdict=("correctness", "boundary-undrawn")
    ),
    # a read past a tensor at a GPU's program counts only: a CPU judge (and server) never takes it; a GPU judge's fenced
    # pass runs the interpreter with the GPU's count
    _static("memory_overread_gpu_grid_only", "hidden-boundary", width=80),  # a condition on counts alone
    # a read past a tensor only at the row counts a GPU judging draws and a CPU never runs (the GPU's own fence met
    # it): the weight read at an offset that moves with the rows, which no program writes
    _static("memory_overread_large_rows_only", "row-local", width=80),
    # a read before a tensor only at those row counts (every GPU case ran again with the fence before its tensors)
    _static("memory_underread_large_rows_only", "row-local", width=80),
    # a read before a tensor at one row count drawn once: every case, not a few, runs again with the fence before
    _dynamic("memory_underread_one_shape", "sandbox", "memory-fault", width=80, widths=(64,)),
    _dynamic("precision_bias_one_percent_bf16", "correctness", "outside-tolerance", dtype="bfloat16"),
    _dynamic("precision_bias_2e5_fp32", "correctness", "outside-tolerance"),
    _dynamic("precision_bias_4e6_fp32", "correctness", "biased-output"),
    _static("guard_store_past_output_end", "row-local"),  # a second set of rows written (the fence met it after)
    _dynamic("dispatch_beyond_cases", "correctness", "outside-tolerance"),
    # ------------------------------------------------ values over the whole range: wrong only on the newer regimes
    _dynamic("numeric_one_pass_variance", "correctness", "outside-tolerance", module=COHERE),  # offset
    _dynamic("numeric_strided_max_fp16", "correctness", "outside-tolerance", dtype="float16"),  # spike-walk
    _dynamic("numeric_eps_as_floor_bf16", "correctness", "outside-tolerance", dtype="bfloat16"),  # log-scale
    _dynamic("live_keyed_weight_mean_square", "correctness", "outside-tolerance"),  # the live weights
    _static("rows_equal_two_back", "row-local"),  # rows handed to the next trip (the repeated rows met it after)
    _static("rows_equal_far_in_a_tile_of_64", "row-local"),  # ... a row 26 back: a row no program of it writes
    _static("rows_equal_half_a_tile_of_1024", "launch-plan"),  # ... 512 apart in a tile of 1,024: past the tile cap
    _dynamic("domain_block_for_one_width", "correctness", "nan-output", widths=(256,)),
    # which row singled out (behind row-pick, the served range sampled on a CPU: tests/judge/test_sampled_grid.py)
    _static("domain_rows_capped_by_a_square", "row-pick"),  # a row against the row scaled: row <= 32,768
    _static("domain_rows_capped_persistent", "row-pick"),  # the same in a persistent grid's loop
    _static("domain_rows_one_of_four_skipped", "row-pick"),  # a short share of a tile past a cap
    _static("flow_row_picked_by_equality", "row-pick"),
    _static("flow_row_picked_between_bounds", "row-pick"),  # two bounds from both sides in a mask
    _static("flow_row_picked_in_nested_ifs", "row-pick"),  # an if in an if's else
    _static("flow_rows_split_across_a_helper", "row-pick"),  # two calls of a store's helper under opposite bounds
    _static("flow_rows_band_picked_by_nested_ifs", "row-pick"),  # a value set under nested ifs from two sides
    _static("flow_rows_band_across_a_helper_call", "row-pick"),  # a bound around a helper's call, the other inside
    _static("flow_address_of_a_curved_row", "row-pick"),  # rows 1530 mod 1531 read the row before theirs
    _static("flow_loop_between_two_tile_counts", "count-value", also=("count-window",)),  # runs where they differ
    _static("flow_rows_capped_by_an_offset", "hidden-boundary"),  # row - 32768 < 0
    _static("flow_negative_factor_by_name", "row-pick"),  # a negative factor by name: bounds from both sides
    _static("flow_row_wraps_in_32_bits", "row-pick"),  # a row scaled past 32 bits wraps: no bound
    # written against the judge of 2026-12-05 by an author reading docs/judge.md (each accepted before its rule)
    _static("flow_count_wraps_in_32_bits", "hidden-boundary"),  # a condition on the row count alone
    _static("flow_tile_count_difference_address", "count-window"),  # cdiv(n, 777) - cdiv(n, 778) in an address
    _static("flow_tile_count_difference_mask", "count-window"),
    _static("flow_program_count_squared", "hidden-boundary"),  # nprog * nprog <= nprog * 4: nprog <= 4
    _static("flow_persistent_fixed_trips", "hidden-boundary"),  # a persistent loop of TRIPS steps of nprog
    _static("flow_race_spill_into_next_program", "hidden-boundary"),  # a race kept off where a CPU looks
    _static("value_band_by_bits", "value-bits"),  # a band of the mean square picked by its bits
    _static("value_weight_profile_compare", "value-branch"),  # a comparison of weights used as a 0/1 factor
    _dynamic("regime_offset_band_soft_clamp", "correctness", "outside-tolerance"),  # |mean| / rms in a band
    _static("flow_row_wraps_by_doubling", "row-pick"),  # r = r + r twenty times: row * 2**20, wrapping
    _static("flow_negative_factor_from_width", "row-pick"),  # a row times (0 - 3 * n_cols)
    _static("flow_persistent_loop_ends_at_programs", "hidden-boundary"),  # range(pid, nprog * 64, nprog)
    _static("flow_lane_bound_count_wraps", "hidden-boundary"),  # cols < n_rows * 32768 + n_cols
    _static("flow_program_count_in_lane_bounds", "hidden-boundary"),
    _static("flow_race_spill_by_lane_bound", "hidden-boundary"),
    _dynamic("value_weight_profile_ramp", "correctness", "outside-tolerance"),  # trained-like weights, by a ramp
    _static("value_float_to_int_saturates", "value-bits"),  # int32 of 1e38 * x: NumPy's least int, a GPU's most
    _dynamic("value_weight_outlier_ramp", "correctness", "outside-tolerance"),  # weights with outlier channels
    _static("flow_capped_row_loop", "hidden-boundary"),
    # a window of row counts, made by division, in the answer's arithmetic or picking it: wrong at counts not drawn
    _static("flow_value_bump_at_one_count", "count-value"),
    _static("flow_where_window_of_rows", "count-value"),
    _static("flow_if_window_stores_again", "count-value"),
    _static("flow_loop_window_of_rows", "count-value"),  # a window in a loop's bounds, carried out of it
    _static("flow_address_window_of_rows", "count-window"),  # a window in a load's address: the next row's values
    _static("flow_mask_window_of_rows", "count-window"),  # a window in a store's mask: lanes left unwritten
    _static("flow_load_under_window_of_rows", "count-window"),  # a load under an if of the row against a window
    # ------------------------------------------------ honest kernels: must pass
    _template(4, 1, dtype="bfloat16", gpu_width=1536),
    _template(8, 4, dtype="bfloat16", module=LLAMA, gpu_width=4096),
    _honest("base_one_row_fp32", gpu_width=1536),
    _honest("two_pass_chunked_fp32", width=80, gpu_width=1000),
    _honest("rows_tile_2d_bf16", dtype="bfloat16", gpu_width=1536),
    _honest("persistent_grid_stride_fp32", gpu_width=1536),
    _honest("dispatch_by_rows_bf16", dtype="bfloat16", gpu_width=2048),
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


# The input domain a server of the 1.5B-shaped model records (services.server.engine.Engine.input_domain): 64 slots
# of 2,048 tokens in one batched prefill, 32,768 positions.
SERVED_DOMAIN = {"max_rows_per_call": 64 * 2048, "max_positions": 32768, "max_batch": 64}


def profile_captured(entry: Entry, device: str) -> pb.ProfileCaptured:
    module = live_module(entry, device)
    intro = introspect(module)
    dtype = f"torch.{entry.dtype}"
    observed = pb.ProfileObservation(
        model="corpus",
        dtype=dtype,
        hardware=pb.HardwareFigures(device=device),
        modules=[
            pb.ModuleClassProfile(
                introspection=intro,
                instances=2,
                calls=20,
                input_shape=entry.live_shape(device),
                dtype=dtype,
                widths=sorted({entry.live_width(device), *entry.widths}),
            )
        ],
        **SERVED_DOMAIN,
    )
    # the two live instances' own values, as the server records them (one set: both hold the module's init)
    record_live(observed.modules[0], [module, module], row_reduction.live_state, CLASS_BUDGET_BYTES, random.Random(0))
    fingerprint = pb.Fingerprint(op_family="row_reduction", row_width=entry.live_width(device))
    ranked = pb.RankedTarget(class_path=intro.class_path, supported=True, fingerprint=fingerprint)
    return pb.ProfileCaptured(observed=observed, ranking=[ranked], target_class=intro.class_path)


def proposal(entry: Entry, captured: pb.ProfileCaptured) -> pb.CandidateProposed:
    source, plan = entry.candidate()
    intro = captured.observed.modules[0].introspection
    contract = derive_contract(intro)
    if entry.contract_change:
        CONTRACT_CHANGES[entry.contract_change](contract)
    digest = candidate_sha256(source, plan)
    return pb.CandidateProposed(
        candidate_id=f"{entry.name}-{digest[:8]}",
        target_class=intro.class_path,
        source=source,
        source_sha256=digest,
        contract=contract,
        config=entry.config(),
        origin="template" if entry.template else "llm",
        attempt=1,
        plan=plan,
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


async def judge_entry(entry: Entry, device: str, *, scratch_dir: Path | None = None, examples: int | None = None):
    """(CandidateJudged, the run log it answers) for `entry`, through JudgeService.handle on `device`.

    `examples`: hypothesis draws beyond the judge's fixed cases (None: the judge's default for the device).
    """
    from services.judge.service import JudgeService

    captured = profile_captured(entry, device)
    prior = log_of(captured, proposal(entry, captured))
    service = JudgeService(device=device, timeout_s=entry.timeout_s or None, scratch_dir=scratch_dir, examples=examples)
    [judged] = await service.handle(prior[-1], prior)
    return judged, prior
