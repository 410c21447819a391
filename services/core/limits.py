"""How much work one request may ask for: the one place the CLI, the profiler and the server read their limits.

Pure (no I/O, no torch), so the CLI imports it without loading a model. Every input that makes the server work
is bounded where it enters, and a refusal names the limit it broke; without them one request (`yantra optimize`
with the same --prompt many times, a RunRequested of 5,000 prompts, a MeasureDecode of 10,000) held the model
for over ten minutes and starved `yantra generate`.

What a run measures: each of its prompts is decoded `decode_tokens` times over in about a dozen passes (warm-up,
the hooked profile, the live-input record, 5 measured repeats before and 5 after, `services.profiler.domain`).
Batch-1 decode of the 1.5B shape ran at ~40 tok/s on the H200 and a CPU is slower, so the tokens of one pass
decide how long a run holds the model; profiling needs a handful of short requests, not a corpus.

What the model bounds (a prompt plus its new tokens within its positions) only the server knows; it refuses
that itself, naming the model's bound.
"""

from __future__ import annotations

from collections.abc import Sequence

# ------------------------------------------------------------------ a run (RunRequested, `yantra optimize`)

# Prompts a run profiles and measures with. The profile ranks classes by where time goes, which a handful of
# varied requests shows (the defaults are 4); more only lengthens every pass.
MAX_RUN_PROMPTS = 16
# Characters of one prompt (of a run, and of the Admin RPCs that measure it). A few paragraphs: enough to
# profile a long prefill, short enough that encoding and prefilling 16 of them is not the run's cost.
MAX_PROMPT_CHARS = 4_000
# New tokens per prompt when measuring (the default is 16). A decode rate settles within a few dozen tokens;
# past that each token is time the model is held for no better figure.
MAX_DECODE_TOKENS = 256
# Tokens of one measuring pass, prompts x decode tokens: the product is what holds the model. 1,024 is 16
# prompts of 64 tokens or 4 of 256; ~26 s a pass at the H200's ~40 tok/s, so a whole profile (~7 passes)
# stays well inside the profiler's default 600 s deadline for its call.
MAX_RUN_DECODE_TOKENS = 1_024
# Kernels judged per target before it is concluded: each is a sandboxed compile and a correctness and timing
# run in the judge.
MAX_CANDIDATES = 32
# Targets one run works on in turn (0: every target a template writes; a profile ranks a few dozen classes).
MAX_TARGETS = 16

# ------------------------------------------------------------------ Admin RPCs (CaptureProfile, MeasureDecode)

# The profiler sends a run's prompts, so they take the same bounds (prompts_problem); its repeats are 5.
MAX_MEASURE_REPEATS = 100

# ------------------------------------------------------------------ Generate

# Token ids of one request: 128 Ki, the longest context of the models served today (Llama 3.1's); the model's
# own positions, usually fewer, are checked after.
MAX_GENERATE_TOKEN_IDS = 131_072
# Characters of one prompt: encoding runs on the server's event loop, so a prompt is bounded before it is
# encoded; 4 characters a token (English text through a BPE tokenizer) of the longest context.
MAX_GENERATE_PROMPT_CHARS = 4 * MAX_GENERATE_TOKEN_IDS
# Stop strings are bounded beside their scanner (services.server.stops: MAX_STOPS, MAX_STOP_CHARS).


def prompts_problem(prompts: Sequence[str], what: str = "a run") -> str:
    """Why these prompts are more than `what` takes (their count, then each one's length), naming the limit; ""
    when they are not."""
    if len(prompts) > MAX_RUN_PROMPTS:
        return f"{len(prompts)} prompts given; {what} takes at most {MAX_RUN_PROMPTS} (limits.MAX_RUN_PROMPTS)"
    for i, prompt in enumerate(prompts):
        if len(prompt) > MAX_PROMPT_CHARS:
            return (
                f"prompt {i + 1} is {len(prompt):,} characters long; {what} takes prompts of at most "
                f"{MAX_PROMPT_CHARS:,} characters (limits.MAX_PROMPT_CHARS)"
            )
    return ""


def run_problem(prompts: int, decode_tokens: int, max_candidates: int = 0, max_targets: int = 0) -> str:
    """Why a run of `prompts` prompts (their count as measured, defaults filled in) of `decode_tokens` new tokens
    asks for more work than a run may, naming the limit; "" when it does not. The prompts themselves (their count
    and lengths) are `prompts_problem`'s."""
    if decode_tokens > MAX_DECODE_TOKENS:
        return (
            f"decode_tokens is {decode_tokens}; a run measures at most {MAX_DECODE_TOKENS} new tokens a prompt "
            "(limits.MAX_DECODE_TOKENS)"
        )
    if prompts * decode_tokens > MAX_RUN_DECODE_TOKENS:
        return (
            f"{prompts} prompts x {decode_tokens} decode tokens is {prompts * decode_tokens:,} tokens a measuring "
            f"pass; a run decodes at most {MAX_RUN_DECODE_TOKENS:,} (limits.MAX_RUN_DECODE_TOKENS): fewer prompts "
            "or fewer decode tokens"
        )
    if max_candidates > MAX_CANDIDATES:
        return f"max_candidates is {max_candidates}; a run judges at most {MAX_CANDIDATES} (limits.MAX_CANDIDATES)"
    if max_targets > MAX_TARGETS:
        return f"max_targets is {max_targets}; a run works on at most {MAX_TARGETS} (limits.MAX_TARGETS)"
    return ""


MAX_TARGET_NAME_CHARS = 200  # a module class path (`transformers.models.qwen2.modeling_qwen2.Qwen2RMSNorm`: 54)


def targets_problem(names: list[str]) -> str:
    """Why a run's `only_targets` cannot be what it asks for (too many, an empty or overlong name); "" when fine."""
    if len(names) > MAX_TARGETS:
        return f"{len(names)} targets named; a run works on at most {MAX_TARGETS} (limits.MAX_TARGETS)"
    for i, name in enumerate(names, 1):
        if not name.strip():
            return f"target {i} of {len(names)} is empty: name a module class (`Qwen2MLP`) or its full path"
        if len(name) > MAX_TARGET_NAME_CHARS:
            return f"target {i} is {len(name):,} characters long; a class path is at most {MAX_TARGET_NAME_CHARS}"
    return ""


def generate_problem(prompt_chars: int, token_ids: int) -> str:
    """Why a Generate request's prompt is longer than any request may be, naming the limit; "" when it is not."""
    if prompt_chars > MAX_GENERATE_PROMPT_CHARS:
        return (
            f"the prompt is {prompt_chars:,} characters long; a request takes at most "
            f"{MAX_GENERATE_PROMPT_CHARS:,} (limits.MAX_GENERATE_PROMPT_CHARS)"
        )
    if token_ids > MAX_GENERATE_TOKEN_IDS:
        return (
            f"{token_ids:,} token ids given; a request takes at most {MAX_GENERATE_TOKEN_IDS:,} "
            "(limits.MAX_GENERATE_TOKEN_IDS)"
        )
    return ""
