"""What an LLM author is asked (pure): the family's reference source, the contract, the physics fingerprint, the
live shapes and the run's earlier verdicts for the target.

Verdicts are told as the judge's layers saw them, with one rule: compile and correctness failures verbatim (the
model can fix those), integrity refusals (the static check, the contract check, the sandbox) only as their
category, never the rule that fired or its words (the model is not taught the walls it hit).
"""

from __future__ import annotations

import inspect
import json

from google.protobuf import json_format

from services import ops
from services.coder.llm_answer import answer_of
from services.core import events as ev
from services.core import run_state
from services.core.events import Recorded
from services.core.pb import events_pb2 as pb

SYSTEM = """\
You write Triton kernels for gpuyantra, a system that swaps faster kernels into a live PyTorch model.
Answer with one JSON object and nothing else, of exactly the fields of the given schema:
- "source": Python source holding only `import triton`, `import triton.language as tl`, literal constants and
  @triton.jit kernels. No host code: no other imports, no functions without @triton.jit, no classes, no torch.
  The op family's own wrapper allocates the output, launches your kernels as the launches say, and returns.
- "launches": how the wrapper launches the kernels, in the op family's vocabulary only (arguments, constexpr
  values and grids as listed), like the reference's.
The kernel must compute exactly what the reference computes, rounding as it rounds, for every shape and dtype
the live module is called with; then it should be as fast as possible on the GPU."""


def _dict(msg) -> dict:
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def _json(value) -> str:
    return json.dumps(value, sort_keys=True)


def verdict_summary(judged: pb.CandidateJudged) -> str:
    """A verdict as the model is told it (see the module's docstring)."""
    if judged.reward >= 1:
        return f"passed, reward {judged.reward:+d}: {judged.reason}"
    obs = judged.observed
    if not obs.HasField("static_check") or not obs.static_check.passed:
        return "refused by the integrity checks (static check)"
    if not obs.HasField("contract") or not obs.contract.passed:
        return "refused by the integrity checks (contract check)"
    if obs.sandbox.rule_id or (obs.sandbox.gpu_health and obs.sandbox.gpu_health not in ("ok", "no GPU")):
        return "refused by the integrity checks (sandbox)"
    cor = obs.correctness
    rule = f"{cor.rule_id}: " if cor.rule_id else ""
    return f"failed correctness: {rule}{cor.error or judged.reason or 'not run'}"


def _vocabulary(family: str) -> str:
    fam = ops.family(family)
    lines = [(fam.__doc__ or "").strip()]
    for name in ("ARGS", "CONSTEXPR_EXPRS", "GRIDS", "NUM_WARPS", "MAX_LAUNCHES"):
        value = getattr(fam, name, None)
        if value is not None:
            lines.append(f"{name}: {_json(list(value) if isinstance(value, tuple) else value)}")
    return "\n".join(lines)


def _profile(prior: list[Recorded], target: str) -> pb.ModuleClassProfile:
    captured = ev.last(prior, "ProfileCaptured")
    if captured is not None:
        for module in captured.msg.observed.modules:
            if module.introspection.class_path == target:
                return module
    return pb.ModuleClassProfile()


def _fingerprint(prior: list[Recorded], target: str) -> dict:
    captured = ev.last(prior, "ProfileCaptured")
    for ranked in captured.msg.ranking if captured is not None else ():
        if ranked.class_path == target:
            found = _dict(ranked.fingerprint)
            found.pop("vector", None)  # the retrieval embedding: numbers that say nothing more
            return found
    return {}


def _example(template, variant: str, profile: pb.ModuleClassProfile) -> str:
    """The template's first search config for `variant` at the live shape, in the answer format."""
    shape = tuple(int(d) for d in profile.input_shape)
    config = template.search_configs(variant, shape[-1] if shape else 0, live_shape=shape)[0]
    return answer_of(template.render(config), template.plan(config))


def _reference(family: str, variant: str, profile: pb.ModuleClassProfile) -> str:
    """The reference part of the prompt. For a variant the family's template writes: that template's kernel (as
    every run asked before). For one no template writes: the family's own source (what the variant computes, as
    the judge's oracle computes it, and the wrapper that runs the launches) and, for the answer's format and launch
    shape only, the template's kernel of a sibling variant, said to compute something else."""
    template = ops.template(family)
    if variant in template.VARIANTS:
        return (
            "## Reference: the family's template for this variant, in the answer format (correct, the judge's "
            f"oracle agrees with it)\n{_example(template, variant, profile)}"
        )
    sibling = template.VARIANTS[0]
    return "\n\n".join(
        [
            f"## Reference: the op family's source (no template writes {variant}; the judge's oracle is the "
            f"family's own formula for {variant}, and its wrapper runs your launches)\n```python\n"
            f"{inspect.getsource(ops.family(family))}```",
            f"## Example: the family's template for the sibling variant {sibling}, in the answer format (it computes "
            f"{sibling}, NOT {variant}: an example of the format and the launch shape only)\n"
            f"{_example(template, sibling, profile)}",
        ]
    )


def _history(prior: list[Recorded], target: str) -> list[str]:
    state = run_state.fold(prior)
    view = state.target(target)
    judged = {j.candidate_id: j for j in view.judged}
    lines = []
    for proposal in view.proposals:
        verdict = judged.get(proposal.candidate_id)
        said = verdict_summary(verdict) if verdict is not None else "not judged yet"
        launches = _json([_dict(launch) for launch in proposal.plan.launches])
        lines.append(f"- attempt {proposal.attempt} ({proposal.origin}), launches {launches}: {said}")
        if proposal.origin == "llm" and verdict is not None and said.startswith("failed correctness"):
            lines.append(f"  its source:\n{proposal.source}")
    return lines


def user_prompt(
    prior: list[Recorded], target: str, family: str, variant: str, contract: pb.Contract, attempt: int
) -> str:
    run = ev.first(prior, "RunRequested")
    budget = (run.msg.max_candidates if run is not None else 0) or 3
    profile = _profile(prior, target)
    live = {
        "computes": profile.computes or variant or "(the family's first variant)",
        "input_shape": list(profile.input_shape),
        "dtype": profile.dtype,
        "row_widths": list(profile.widths),
        "second_shape": list(profile.second_shape),
        "third_shape": list(profile.third_shape),
        "calls": profile.calls,
        "total_time_us": profile.total_time_us,
    }
    history = _history(prior, target) or ["- none: this is the first candidate for the target"]
    parts = [
        f"Target: {target} (op family {family}, variant {variant or '(first)'}); candidate {attempt} of {budget}.",
        f"## The op family's launch vocabulary\n{_vocabulary(family)}",
        f"## The deployment contract (the wrapper's parameters bound to the live module)\n{_json(_dict(contract))}",
        f"## Physics fingerprint of the op at its live shape\n{_json(_fingerprint(prior, target))}",
        f"## Live shapes\n{_json(live)}",
        _reference(family, variant, profile),
        "## Earlier candidates for this target and their verdicts\n" + "\n".join(history),
        "Answer with a new candidate (not one already tried) as one JSON object of the schema.",
    ]
    return "\n\n".join(parts)
