"""An LLM author's answer, and the candidate it is (pure).

The model is asked for the candidate format only: kernel source plus a launch plan in the target family's
vocabulary, as one JSON object of fixed fields (`CandidateAnswer`, extra fields forbidden) validated from the
reply text. Never host Python: the source goes through `candidate_sha256`, the judge's static check and every
other layer like a template's. `candidate` turns a recorded `AuthorObservation` into (source, plan) or the reason
there is none, the same way live and on replay.
"""

from __future__ import annotations

import ast
import json
import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from services.core.pb import events_pb2 as pb

# Finish reasons that mean the answer is whole: Gemini's "STOP", OpenAI's "stop"; a provider that names none.
WHOLE = ("STOP", "stop", "")
TRUNCATED = ("MAX_TOKENS", "length")
_FENCE = re.compile(r"^```[a-zA-Z]*\n(?P<body>.*)\n```$", re.S)


class Constexpr(BaseModel):
    """One constexpr parameter of the kernel: an integer literal or a family expression ("cols", "block_cols")."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=64)
    value: str = Field(max_length=64)

    @field_validator("value", mode="before")
    @classmethod
    def _integer_as_text(cls, value):
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class Launch(BaseModel):
    """One launch of a kernel of the source, in the family's vocabulary (a LaunchPlan's KernelLaunch)."""

    model_config = ConfigDict(extra="forbid")
    kernel: str = Field(max_length=128)
    args: list[str] = Field(max_length=32)
    constexprs: list[Constexpr] = Field(max_length=32)
    grid: str = Field(max_length=128)
    num_warps: int = Field(ge=1, le=64)
    num_stages: int = Field(ge=0, le=16)
    max_rows: int = Field(ge=0, le=1 << 40)


class CandidateAnswer(BaseModel):
    """What the model answers: @triton.jit kernel source and how to launch it. Nothing else."""

    model_config = ConfigDict(extra="forbid")
    source: str = Field(max_length=200_000)
    launches: list[Launch] = Field(min_length=1, max_length=8)


def response_schema() -> dict:
    """The JSON schema the providers ask the model's answer to follow (structured output)."""
    return CandidateAnswer.model_json_schema()


def answer_of(source: str, plan: pb.LaunchPlan) -> str:
    """A candidate written in the answer format (the prompt's example is the family's template so written)."""
    launches = [
        {
            "kernel": launch.kernel,
            "args": list(launch.args),
            "constexprs": [{"name": k, "value": v} for k, v in sorted(launch.constexprs.items())],
            "grid": launch.grid,
            "num_warps": launch.num_warps,
            "num_stages": launch.num_stages,
            "max_rows": launch.max_rows,
        }
        for launch in plan.launches
    ]
    return json.dumps({"source": source, "launches": launches}, indent=1)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "the answer"
    return f"{where}: {error['msg']}" + (f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else "")


def _is_triton_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Attribute) and target.attr == "jit" and ast.unparse(target.value) == "triton"


def _not_triton(source: str) -> str:
    """Why `source` is not Triton kernel source at all ("" when it defines a @triton.jit function); whatever else
    it holds (host code, imports) is the judge's to refuse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        return f"not Triton: the source does not parse as Python ({exc.__class__.__name__}: {exc})"
    jitted = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
              and any(_is_triton_jit(d) for d in node.decorator_list)]  # fmt: skip
    return "" if jitted else "not Triton: the source defines no @triton.jit kernel"


def candidate(ask, observed: pb.AuthorObservation) -> tuple[str, pb.LaunchPlan] | str:
    """(source, plan) of the candidate `observed` answers `ask` with (an `authors.Ask`: its family names the plan's),
    or why it answers none, in a line that starts with the failure's category."""
    if observed.error:
        return f"no answer: {observed.error}"
    if observed.finish_reason in TRUNCATED:
        return f"truncated: the answer was cut at its token limit (finish reason {observed.finish_reason})"
    if observed.finish_reason not in WHOLE:
        return f"blocked: the provider stopped the answer (finish reason {observed.finish_reason})"
    text = observed.answer.strip()
    if not text:
        return "empty: the answer holds no text"
    fenced = _FENCE.match(text)  # a model may wrap JSON in a code fence even when asked for JSON
    if fenced:
        text = fenced.group("body")
    try:
        answer = CandidateAnswer.model_validate_json(text)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            return f"malformed: the answer is not JSON ({_first_error(exc)})"
        return f"schema: the answer is not the candidate format ({_first_error(exc)})"
    problem = _not_triton(answer.source)
    if problem:
        return problem
    plan = pb.LaunchPlan(family=ask.family)
    try:
        for launch in answer.launches:
            plan.launches.append(
                pb.KernelLaunch(
                    kernel=launch.kernel,
                    args=launch.args,
                    constexprs={c.name: c.value for c in launch.constexprs},
                    grid=launch.grid,
                    num_warps=launch.num_warps,
                    num_stages=launch.num_stages,
                    max_rows=launch.max_rows,
                )
            )
        pb.CandidateProposed(source=answer.source)  # text protobuf cannot hold (a lone surrogate) fails here
    except (ValueError, TypeError) as exc:
        return f"schema: the answer does not fit a candidate ({exc})"
    return answer.source, plan
