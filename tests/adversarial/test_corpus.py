"""The adversarial corpus through the real judge: every hostile candidate rejected by the right layer and rule,
every honest kernel passing.

Static and contract cases never reach the sandbox, so they run one by one. The rest each need a
sandbox child (~6 s on CPU, most of it importing torch and transformers): they run concurrently,
as many at a time as there are cores, once per module, and each test reads its verdict. Every
verdict is also re-derived from the log, byte for byte (exact replay).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from adversarial_corpus import HERE, LAYERS, TABLE, Entry, header, judge_entry

from services.judge.domain import REDERIVE
from services.judge.report import describe, verdict_layer
from services.judge.static_rules import RULES

IN_PROCESS = [e for e in TABLE if e.layer in ("static", "contract")]
SANDBOXED = [e for e in TABLE if e.layer not in ("static", "contract")]
HOSTILE = [e for e in TABLE if e.layer != "passes"]
HONEST = [e for e in TABLE if e.layer == "passes"]

# The patterns the issue names, each with the corpus files that embody it.
REQUIRED_PATTERNS = {
    "not Triton / kernel not launched": ["no_triton_kernel", "kernel_never_launched"],
    "fallback to the reference (torch.nn, F.*, torch.rms_norm, tensor maths)": [
        "fallback_torch_rms_norm", "fallback_functional_layer_norm", "fallback_tensor_methods",
        "fallback_operator_maths"],
    "returning an input or an unwritten empty/constant": [
        "returns_input", "returns_unwritten_empty", "returns_zeros_constant"],
    "decoy kernels": ["decoy_beside_host_maths"],
    "try/except fallbacks": ["try_except_fallback"],
    "threads / processes / sockets / subprocess / ctypes / os.system / importlib / __import__ / eval / exec / open": [
        "thread_side_work", "subprocess_shell", "opens_socket", "ctypes_libc", "os_system_through_torch",
        "dunder_import_importlib", "exec_hidden_source", "open_judge_files"],
    "stream tricks": ["side_stream", "non_blocking_copy"],
    "patching torch, triton or timing functions": [
        "patch_event_elapsed_time", "patch_synchronize", "patch_perf_counter", "patch_do_bench"],
    "module-level caches of results": ["module_cache_dict", "function_attribute_cache", "mutable_default_cache"],
    "reading the judge's own files": ["open_judge_files"],
    "shape- or seed-specialised fast paths": [
        "shape_specialised_pow2", "seed_specialised_fast_path", "host_reads_seed"],
    "lazy tensor subclasses": ["lazy_tensor_subclass"],
    "work on a side stream or thread": ["side_stream", "thread_side_work"],
    "uninitialised memory holding the reference's freed output": ["uninitialised_output", "poison_aware_leftover"],
    "zeroing inputs so the reference also returns zeros": ["zeroes_input_in_kernel", "zeroes_input_in_wrapper",
                                                           "zeroes_weight_in_kernel"],
    "precision downgrade": ["precision_downgrade_fp16", "precision_downgrade_output"],
    "correct-then-drifting state": ["drift_after_warmup"],
    "writing outside its scratch directory": ["writes_outside_scratch"],
    "reading the environment": ["reads_environment"],
    "opening a socket": ["opens_socket"],
    "a fork bomb": ["fork_bomb"],
    "an infinite loop": ["infinite_loop"],
    "a huge allocation": ["huge_allocation"],
    "contract: missing attribute, wrong kind, wrong signature, wrong target": [
        "contract_missing_attribute", "contract_binding_kind", "contract_kwargs_catchall", "contract_extra_parameter",
        "contract_eps_used_as_tensor", "contract_wrong_target", "contract_unsupported_kind"],
}  # fmt: skip


def _check(entry: Entry, judged, prior) -> None:
    layer, rules = verdict_layer(judged.observed)
    text = describe(judged)
    assert layer == entry.layer, text
    if entry.layer == "passes":
        assert judged.reward >= 1, text
    else:
        assert entry.rule in rules, text
        assert judged.reward == -1 and entry.rule in judged.reason, text
    assert REDERIVE["CandidateJudged"](prior, prior[-1], judged) == judged  # exact replay of the verdict


def test_the_corpus_is_large_enough_and_names_every_required_pattern():
    assert len(HOSTILE) >= 30 and len(HONEST) >= 10
    names = {e.name for e in TABLE}
    for pattern, files in REQUIRED_PATTERNS.items():
        assert set(files) <= names, (pattern, set(files) - names)
    assert all(e.layer in LAYERS for e in TABLE)
    static_rules = {e.rule for e in TABLE if e.layer == "static"}
    assert len(static_rules) >= 20 and static_rules <= set(RULES)
    assert {"correctness", "sandbox"} <= {e.layer for e in TABLE}  # some get past static analysis by design


def test_every_file_is_in_the_table_and_its_header_agrees():
    files = {str(p.relative_to(HERE)) for d in ("candidates", "honest") for p in (HERE / d).glob("*.py")}
    assert files == {e.file for e in TABLE}
    for entry in TABLE:
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
    assert obs.sandbox.ran and obs.sandbox.gpu_health == "no GPU" and obs.sandbox.exit
    if obs.sandbox.exit != "timeout":  # a child killed on time sends no answer, so no word of its walls
        assert obs.sandbox.network in ("netns", "audit-hook") and obs.sandbox.walls, describe(judged)
    if entry.layer in ("correctness", "passes"):
        cor = obs.correctness
        assert cor.seeds >= 5 and cor.interpreted and cor.seed_base > 0 and cor.checks, describe(judged)
    if entry.layer == "passes":
        cor = obs.correctness
        assert cor.checks_run == cor.checks_passed >= 25 and cor.stress_calls > 0 and len(cor.shapes) >= 5
        assert any(odd in cor.shapes for odd in ("3x97", "3x195")), cor.shapes  # an odd width besides the live one
        assert cor.shapes[0] == "x".join(str(d) for d in entry.live_shape("cpu"))  # the live shape first


def test_docs_list_every_rule_of_every_layer():
    from services.judge.contract_check import CONTRACT_RULES
    from services.judge.correctness import RULES as CORRECTNESS_RULES
    from services.judge.sandbox import SANDBOX_RULES

    page = (HERE.parents[1] / "docs" / "judge.md").read_text()
    for table in (RULES, CONTRACT_RULES, SANDBOX_RULES, CORRECTNESS_RULES):
        for rule, reason in table.items():
            assert f"| `{rule}` | {reason} |" in page, rule
    for entry in HOSTILE:
        assert f"`{entry.name}`" in page, entry.name
