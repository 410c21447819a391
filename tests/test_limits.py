"""How much one request may ask for (services.core.limits): every input bounded where it enters, the limit named.

The gRPC answers are in tests/server/test_grpc.py, the profiler's RunFailed on a real bus in
tests/profiler/test_profiler_service.py; here the pure checks, the profiler's domain and the CLI's arguments.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.cli import build_parser
from services.core import limits
from services.core.nats_launcher import free_port
from services.core.pb import events_pb2 as pb
from services.profiler import domain
from services.profiler.adapters import CALL_TIMEOUT_S, TIMEOUT_ENV, timeout_from_env

ROOT = Path(__file__).resolve().parent.parent


def test_a_runs_defaults_fit_its_limits():
    """A RunRequested with no prompts or decode tokens is measured with the profiler's defaults, at any
    --decode-tokens the CLI takes: the CLI checks prompts x decode tokens only for prompts it was given."""
    assert len(domain.DEFAULT_PROMPTS) <= limits.MAX_RUN_PROMPTS
    assert all(len(p) <= limits.MAX_PROMPT_CHARS for p in domain.DEFAULT_PROMPTS)
    assert domain.DEFAULT_DECODE_TOKENS <= limits.MAX_DECODE_TOKENS
    assert len(domain.DEFAULT_PROMPTS) * limits.MAX_DECODE_TOKENS <= limits.MAX_RUN_DECODE_TOKENS
    assert domain.MEASURE_REPEATS <= limits.MAX_MEASURE_REPEATS
    assert domain.request_problem(pb.RunRequested()) == ""
    assert limits.MAX_GENERATE_PROMPT_CHARS >= limits.MAX_GENERATE_TOKEN_IDS  # a byte-level prompt fills any context


@pytest.mark.parametrize(
    ("request_", "limit", "words"),
    [
        (pb.RunRequested(prompts=["Hello"] * 5000), "MAX_RUN_PROMPTS", "5000 prompts given; a run takes at most 16"),
        (
            pb.RunRequested(prompts=["Hi", "x" * 4001]),
            "MAX_PROMPT_CHARS",
            "prompt 2 is 4,001 characters long; a run takes prompts of at most 4,000 characters",
        ),
        (pb.RunRequested(decode_tokens=5000), "MAX_DECODE_TOKENS", "decode_tokens is 5000; a run measures at most 256"),
        (
            pb.RunRequested(prompts=["Hi"] * 16, decode_tokens=65),
            "MAX_RUN_DECODE_TOKENS",
            "16 prompts x 65 decode tokens is 1,040 tokens a measuring pass; a run decodes at most 1,024",
        ),
        (pb.RunRequested(max_candidates=1000), "MAX_CANDIDATES", "max_candidates is 1000; a run judges at most 32"),
        (pb.RunRequested(max_targets=100), "MAX_TARGETS", "max_targets is 100; a run works on at most 16"),
    ],
)
def test_the_profiler_refuses_a_run_beyond_a_limit_and_names_it(request_, limit, words):
    problem = domain.request_problem(request_)
    assert words in problem and f"(limits.{limit})" in problem, problem


def test_a_run_at_every_limit_is_taken():
    at_limits = pb.RunRequested(
        prompts=["x" * limits.MAX_PROMPT_CHARS] * limits.MAX_RUN_PROMPTS,
        decode_tokens=limits.MAX_RUN_DECODE_TOKENS // limits.MAX_RUN_PROMPTS,
        max_candidates=limits.MAX_CANDIDATES,
        max_targets=limits.MAX_TARGETS,
    )
    assert domain.request_problem(at_limits) == ""
    assert domain.request_problem(pb.RunRequested(prompts=["Hi"] * 4, decode_tokens=limits.MAX_DECODE_TOKENS)) == ""


def test_too_many_prompts_are_named_before_their_empty_ones():
    """5,000 prompts some of them empty: one line naming the count limit, not a list of thousands of numbers."""
    problem = domain.request_problem(pb.RunRequested(prompts=["", "Hi"] * 2500))
    assert problem.startswith("5000 prompts given") and len(problem) < 200
    assert domain.request_problem(pb.RunRequested(prompts=["Hello", ""])) == "prompt 2 of 2 is empty"


def test_generate_limits_name_the_limit():
    assert limits.generate_problem(limits.MAX_GENERATE_PROMPT_CHARS, 0) == ""
    assert limits.generate_problem(0, limits.MAX_GENERATE_TOKEN_IDS) == ""
    too_long = limits.generate_problem(limits.MAX_GENERATE_PROMPT_CHARS + 1, 0)
    assert "524,289 characters long" in too_long and "(limits.MAX_GENERATE_PROMPT_CHARS)" in too_long
    too_many = limits.generate_problem(0, limits.MAX_GENERATE_TOKEN_IDS + 1)
    assert "131,073 token ids" in too_many and "(limits.MAX_GENERATE_TOKEN_IDS)" in too_many


# ---------------------------------------------------------------- the CLI's arguments


def _refused(capsys, *args: str) -> str:
    """`yantra optimize ARGS` refused by argparse (exit 2): its message."""
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["optimize", *args])
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--prompt", "Hi"] * 17, "argument --prompt: given more than 16 times: a run takes at most 16 prompts"),
        (["--prompt", "x" * 4001], "argument --prompt: a prompt of 4,001 characters is outside 1..4,000"),
        (["--decode-tokens", "257"], "argument --decode-tokens: 257 is outside 1..256"),
        (["--max-candidates", "33"], "argument --max-candidates: 33 is outside 1..32"),
        (["--max-targets", "17"], "argument --max-targets: 17 is outside 0..16"),
        (["--timeout", "0"], "argument --timeout: 0 is not a positive number of seconds"),
        (["--timeout", "-5"], "argument --timeout: -5 is not a positive number of seconds"),
        (["--timeout", "nan"], "argument --timeout: nan is not a positive number of seconds"),
        (["--timeout", "soon"], "argument --timeout: 'soon' is not a number of seconds"),
        (["--server-wait", "-1"], "argument --server-wait: -1 is not a positive number of seconds"),
    ],
)
def test_optimize_refuses_arguments_beyond_a_limit(capsys, args, words):
    assert words in _refused(capsys, *args)


def test_optimize_takes_arguments_at_the_limits():
    args = build_parser().parse_args(
        ["optimize", *(["--prompt", "x" * limits.MAX_PROMPT_CHARS] * 16), "--decode-tokens", "64", "--timeout", "0.5"]
    )
    assert len(args.prompt) == 16 and args.decode_tokens == 64 and args.timeout == 0.5
    assert build_parser().parse_args(["optimize"]).prompt is None  # none given: the profiler's defaults


def test_optimize_refuses_prompts_times_tokens_beyond_the_limit_before_it_connects(tmp_path):
    """16 prompts of 65 decode tokens, each option in range alone: refused (exit 2, the limit named) before any
    NATS is asked, so nothing is requested: the NATS pointed at answers nowhere."""
    env = {**os.environ, "NATS_URL": f"nats://127.0.0.1:{free_port()}", "YANTRA_DATA_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "optimize", *(["--prompt", "Hi"] * 16), "--decode-tokens", "65"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "16 prompts x 65 decode tokens is 1,040 tokens" in result.stderr
    assert "(limits.MAX_RUN_DECODE_TOKENS)" in result.stderr and "NATS" not in result.stderr


def test_demo_refuses_prompts_times_tokens_beyond_the_limit_before_it_starts_the_stack(tmp_path):
    """The same check as `optimize`'s, made before `yantra demo` brings a stack up for a run it would refuse:
    nothing is started, so the data dir holds no stack.json."""
    env = {**os.environ, "YANTRA_DATA_DIR": str(tmp_path / "data")}
    env.pop("NATS_URL", None)
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "demo", *(["--prompt", "Hi"] * 16), "--decode-tokens", "65"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "16 prompts x 65 decode tokens is 1,040 tokens" in result.stderr
    assert "started" not in result.stdout and not (tmp_path / "data" / "stack.json").exists()


# ---------------------------------------------------------------- the profiler's deadline setting


def test_the_profilers_call_deadline_is_a_setting():
    assert timeout_from_env({}) == CALL_TIMEOUT_S == 600.0
    assert timeout_from_env({TIMEOUT_ENV: ""}) == CALL_TIMEOUT_S
    assert timeout_from_env({TIMEOUT_ENV: "90"}) == 90.0
    for bad in ("0", "-3", "inf", "nan", "ten"):
        with pytest.raises(ValueError, match=TIMEOUT_ENV):
            timeout_from_env({TIMEOUT_ENV: bad})


def test_a_bad_deadline_stops_the_profiler_with_a_configuration_error():
    """Exit 2 (what `yantra up` reads as a configuration error and stops for) before connecting to anything."""
    env = {**os.environ, TIMEOUT_ENV: "-1", "NATS_URL": f"nats://127.0.0.1:{free_port()}"}
    result = subprocess.run(
        [sys.executable, "-m", "services.profiler"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and f"profiler: {TIMEOUT_ENV}='-1'" in result.stderr, result.stderr


def test_optimize_refuses_an_empty_target_name_before_it_connects(tmp_path):
    """`--target ""`: refused (exit 2, what to name) before any NATS is asked, as the other run limits are."""
    env = {**os.environ, "NATS_URL": f"nats://127.0.0.1:{free_port()}", "YANTRA_DATA_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "optimize", "--target", "Qwen2MLP", "--target", " "],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "target 2 of 2 is empty: name a module class (`Qwen2MLP`) or its full path" in result.stderr
    assert build_parser().parse_args(["optimize", "--target", "LayerNorm", "--target", "Qwen2MLP"]).target == [
        "LayerNorm",
        "Qwen2MLP",
    ]
