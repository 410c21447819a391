"""The adversarial corpus through the real judge: every hostile candidate rejected by the right layer and rule,
every honest kernel passing.

Static and contract cases never reach the sandbox, so they run one by one; a static verdict must
name the entry's rule first (the first finding) and its `also` rules among the rest. The others each
need a sandbox child (most of its time importing torch and transformers, then the interpreter): they
run concurrently, as many at a time as there are cores (at most 4), once per module, and each test
reads its verdict. Every verdict is also re-derived from the log, byte for byte (exact replay).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from adversarial_corpus import HERE, LAYERS, TABLE, Entry, header, judge_entry

from services.core.candidate_check import FORMAT_RULES
from services.core.kernel_dataflow import RULES as DATAFLOW_RULES
from services.core.kernel_schema import RULES as SCHEMA_RULES
from services.core.row_locality import RULES as ROW_RULES
from services.judge.cases import REGIMES
from services.judge.domain import REDERIVE
from services.judge.report import describe, verdict_layer

IN_PROCESS = [e for e in TABLE if e.layer in ("static", "contract")]
SANDBOXED = [e for e in TABLE if e.layer not in ("static", "contract")]
HOSTILE = [e for e in TABLE if e.layer != "passes"]
HONEST = [e for e in TABLE if e.layer == "passes"]

# The patterns the issue names, each with the corpus files that embody it.
REQUIRED_PATTERNS = {
    # ---- the old corpus (host code: refused by the kernel schema now), with its kernel-only heirs
    "not Triton / kernel not launched": ["no_triton_kernel", "kernel_never_launched", "schema_no_jit_kernel",
                                         "kernel_uninitialised_output"],
    "fallback to the reference (torch.nn, F.*, torch.rms_norm, tensor maths)": [
        "fallback_torch_rms_norm", "fallback_functional_layer_norm", "fallback_tensor_methods",
        "fallback_operator_maths"],
    "returning an input or an unwritten empty/constant": [
        "returns_input", "returns_unwritten_empty", "returns_zeros_constant", "kernel_uninitialised_output"],
    "decoy kernels": ["decoy_beside_host_maths"],
    "try/except fallbacks": ["try_except_fallback", "schema_try_except_in_kernel"],
    "threads / processes / sockets / subprocess / ctypes / os.system / importlib / __import__ / eval / exec / open": [
        "thread_side_work", "subprocess_shell", "opens_socket", "ctypes_libc", "os_system_through_torch",
        "dunder_import_importlib", "exec_hidden_source", "open_judge_files", "schema_dunder_import_name"],
    "stream tricks": ["side_stream", "non_blocking_copy"],
    "patching torch, triton or timing functions": [
        "patch_event_elapsed_time", "patch_synchronize", "patch_perf_counter", "patch_do_bench"],
    "module-level caches of results": ["module_cache_dict", "function_attribute_cache", "mutable_default_cache"],
    "reading the judge's own files": ["open_judge_files"],
    "shape- or seed-specialised fast paths": [
        "shape_specialised_pow2", "seed_specialised_fast_path", "host_reads_seed", "kernel_shape_specialised_pow2",
        "kernel_seed_specialised", "kernel_even_widths_only"],
    "lazy tensor subclasses": ["lazy_tensor_subclass"],
    "work on a side stream or thread": ["side_stream", "thread_side_work"],
    "uninitialised memory holding the reference's freed output": [
        "uninitialised_output", "poison_aware_leftover", "kernel_uninitialised_output", "kernel_poison_aware_leftover"],
    "zeroing inputs so the reference also returns zeros": [
        "zeroes_input_in_kernel", "zeroes_input_in_wrapper", "zeroes_weight_in_kernel", "kernel_zeroes_input",
        "kernel_zeroes_weight"],
    "precision downgrade": ["precision_downgrade_fp16", "precision_downgrade_output", "kernel_precision_downgrade_fp16",
                            "kernel_precision_downgrade_output"],
    "correct-then-drifting state": ["drift_after_warmup", "kernel_drift_after_warmup"],
    "writing outside its scratch directory": ["writes_outside_scratch"],
    "reading the environment": ["reads_environment"],
    "opening a socket": ["opens_socket"],
    "a fork bomb": ["fork_bomb"],
    "an infinite loop": ["infinite_loop", "kernel_infinite_loop"],
    "a huge allocation": ["huge_allocation"],
    "contract: missing attribute, wrong kind, wrong signature, wrong target": [
        "kernel_contract_missing_attribute", "kernel_contract_binding_kind", "kernel_contract_swapped_bindings",
        "kernel_contract_wrong_entrypoint", "kernel_contract_extra_input", "kernel_contract_wrong_target",
        "kernel_contract_unsupported_kind"],
    # ---- the defences of the new format
    "host code beside or inside kernels (decorators, host functions, defaults)": [
        "schema_heuristics_host_lambda", "autotune_hook", "schema_host_function", "schema_default_runs_host_code"],
    "callees a name check cannot see (subscript, call result)": ["schema_subscript_callee",
                                                                  "schema_call_result_callee"],
    "attribute walks to the interpreter (dunders, frames, the numpy handle)": [
        "schema_dunder_class_walk", "schema_frame_walk", "schema_dunder_import_name", "schema_handle_data_tofile"],
    "state that outlives a call (atomics, memory past a tensor)": [
        "schema_atomic_call_counter", "kernel_drift_after_warmup"],
    "inline assembly and device clocks": ["inline_asm_clock", "schema_inline_asm_globaltimer", "schema_device_clock"],
    "a candidate without a launch plan": ["schema_no_plan"],
    "launch plans outside the family's vocabulary (arguments, grids, constexprs, no catch-all)": [
        "plan_arg_outside_vocabulary", "plan_grid_outside_vocabulary", "plan_constexpr_expression",
        "plan_no_catch_all"],
    "input regimes (huge, zero rows, non-finite, weights apart from ones)": [
        "regime_square_in_fp16", "regime_rsqrt_without_eps", "regime_nan_swallowed", "regime_weight_as_one"],
    "row coverage (more rows than live, every residue of the plan's blocks)": [
        "regime_first_rows_only", "regime_grid_under_covers"],
    "a bias inside a fixed tolerance": ["precision_bias_one_percent_bf16", "precision_bias_2e5_fp32",
                                        "precision_bias_4e6_fp32"],
    "values over the whole range (offset rows, a spike walking the row, row scales over many decades)": [
        "numeric_one_pass_variance", "numeric_strided_max_fp16", "numeric_eps_as_floor_bf16"],
    "writes outside the call's tensors (guard bytes)": [
        "guard_store_past_output_end", "guard_store_before_input_start", "kernel_drift_after_warmup"],
}  # fmt: skip


def _check(entry: Entry, judged, prior) -> None:
    layer, rules = verdict_layer(judged.observed)
    text = describe(judged)
    want_layer, want_rule = entry.expected("cpu")
    assert layer == want_layer, text
    if want_layer == "passes":
        assert judged.reward >= 1, text
    else:
        assert want_rule in rules, text
        assert judged.reward == -1 and want_rule in judged.reason, text
    if want_layer == "static":
        assert rules[0] == want_rule and set(entry.also) <= set(rules), text  # the first finding, then the rest
    assert REDERIVE["CandidateJudged"](prior, prior[-1], judged) == judged  # exact replay of the verdict


def test_the_corpus_is_large_enough_and_names_every_required_pattern():
    assert len(HOSTILE) >= 30 and len(HONEST) >= 10
    names = [e.name for e in TABLE]
    assert len(names) == len(set(names))
    for pattern, files in REQUIRED_PATTERNS.items():
        assert set(files) <= set(names), (pattern, set(files) - set(names))
    assert all(e.layer in LAYERS for e in TABLE)
    static_rules = {e.rule for e in TABLE if e.layer == "static"} | {r for e in TABLE for r in e.also}
    assert len(static_rules) >= 12, static_rules
    assert static_rules <= set(SCHEMA_RULES) | set(FORMAT_RULES) | set(DATAFLOW_RULES) | set(ROW_RULES), static_rules
    assert {"correctness", "sandbox", "contract"} <= {e.layer for e in TABLE}  # some get past the schema by design
    assert any(e.template for e in HONEST)  # the shipped template, rendered now, passes too


def test_every_file_is_in_the_table_and_its_header_agrees():
    files = {str(p.relative_to(HERE)) for d in ("candidates", "honest") for p in (HERE / d).glob("*.py")}
    assert files == {e.file for e in TABLE if e.file}
    for entry in TABLE:
        if not entry.file:
            continue
        head = header(entry.path)
        assert head.get("pattern"), entry.file
        assert head.get("layer") == entry.layer and head.get("rule") == entry.rule, (entry.file, head)


@pytest.mark.parametrize("entry", IN_PROCESS, ids=lambda e: e.name)
async def test_static_and_contract_cases_stop_before_the_sandbox(entry, tmp_path):
    judged, prior = await judge_entry(entry, "cpu", scratch_dir=tmp_path)
    _check(entry, judged, prior)
    assert not judged.observed.HasField("sandbox") and not judged.observed.HasField("correctness")


@pytest.fixture(scope="module")
async def sandboxed_verdicts(tmp_path_factory):
    """Every sandboxed entry judged once, concurrently (as many at a time as there are cores)."""
    limit = asyncio.Semaphore(max(1, min(4, os.cpu_count() or 1)))
    scratch = tmp_path_factory.mktemp("corpus")

    async def one(entry: Entry):
        async with limit:
            return await judge_entry(entry, "cpu", scratch_dir=Path(scratch))

    results = await asyncio.gather(*(one(e) for e in SANDBOXED))
    return {e.name: r for e, r in zip(SANDBOXED, results, strict=True)}


@pytest.mark.parametrize("entry", SANDBOXED, ids=lambda e: e.name)
async def test_sandboxed_cases_get_their_verdict(entry, sandboxed_verdicts):
    judged, prior = sandboxed_verdicts[entry.name]
    _check(entry, judged, prior)
    obs = judged.observed
    if entry.expected("cpu")[1] == "boundary-undrawn":  # a plan the interpreter cannot judge: refused before the child
        assert not obs.sandbox.ran, describe(judged)
        return
    assert obs.sandbox.ran and obs.sandbox.gpu_health == "no GPU" and obs.sandbox.exit
    if entry.name == "sandbox_slow_call_per_bytes":  # stopped by the child's clock at the call, long before 600 s
        assert "case 0 at " in obs.sandbox.error and "per-call limit of 20.0 s" in obs.sandbox.error, describe(judged)
        assert obs.sandbox.wall_s < 120, describe(judged)
    if obs.sandbox.exit != "timeout" and obs.sandbox.rule_id != "memory-fault":  # killed or faulted: no answer
        assert obs.sandbox.network in ("netns", "audit-hook") and obs.sandbox.walls, describe(judged)
    if entry.layer in ("correctness", "passes"):
        cor = obs.correctness
        assert cor.cases >= 20 and cor.interpreted and cor.seed_base > 0 and cor.checks, describe(judged)
    if entry.layer == "passes":
        cor = obs.correctness
        assert cor.checks_run == cor.checks_passed >= 25 and cor.stress_calls > 0 and len(cor.shapes) >= 5
        assert "3x97" in cor.shapes, cor.shapes  # an odd width besides the live one
        assert cor.shapes[0] == "x".join(str(d) for d in entry.live_shape("cpu"))  # the live shape first
        assert set(REGIMES) <= set(cor.regimes), cor.regimes  # every value regime met, and passed


def rule_tables() -> dict[str, dict[str, str]]:
    """Every rule of every layer, by the module that owns it (docs/judge.md must list each)."""
    from services.judge.contract_check import CONTRACT_RULES
    from services.judge.sandbox import SANDBOX_RULES
    from services.judge.verdict import RULES as CORRECTNESS_RULES

    return {
        "services.core.kernel_schema.RULES": SCHEMA_RULES,
        "services.core.candidate_check.FORMAT_RULES": FORMAT_RULES,
        "services.core.kernel_dataflow.RULES": DATAFLOW_RULES,
        "services.core.row_locality.RULES": ROW_RULES,
        "services.judge.contract_check.CONTRACT_RULES": CONTRACT_RULES,
        "services.judge.sandbox.SANDBOX_RULES": SANDBOX_RULES,
        "services.judge.verdict.RULES": CORRECTNESS_RULES,
    }


def test_docs_list_every_rule_of_every_layer():
    page = (HERE.parents[1] / "docs" / "judge.md").read_text()
    missing = [
        f"| `{rule}` | {reason} |" for table in rule_tables().values() for rule, reason in table.items()
        if f"| `{rule}` | {reason} |" not in page
    ]  # fmt: skip
    assert not missing, "docs/judge.md lacks these rule rows:\n" + "\n".join(missing)
    unnamed = [entry.name for entry in HOSTILE if f"`{entry.name}`" not in page]
    assert not unnamed, f"docs/judge.md names no hostile entry {unnamed}"
