"""Every registered op family asked the whole protocol (services.ops.protocol), so a sixth family is asked the moment
it has its registry line, before any test of its own is written.

Structurally: every member the Protocols declare and the services call on a family of its kind, its template and
physics found back through the registry, its names its own. Behaviourally, on CPU and in seconds: for a live target
of a tiny preset (the server's own profile of it), its template's first search config passes the static checks and
the judge's contract check; its judging prepares cases whose operands cross to the child and back; its subject, built
in this process as the sandbox child builds it (no sandbox here: the family's own judge tests run one), answers every
case within its reference's bound, at timed shapes its physics counts rows of; and the profiler ranks the target as
one its catalogue writes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import io
import json
from dataclasses import dataclass

import pytest
import torch
from judge_testkit import log_of

from services import ops
from services.core import kernel_dataflow, kernels
from services.core.candidate_check import check_candidate
from services.core.kernel_schema import check_kernel_source
from services.core.pb import events_pb2 as pb
from services.judge import module_factory
from services.judge.cases import undrawn_boundaries
from services.judge.domain import live_target
from services.judge.rounding import compare
from services.judge.service import CPU_MAX_ROWS, JudgeService, family_contract
from services.ops import protocol
from services.ops.protocol import CaseSet, ChildContext, JudgeAsk, LayerCost, operands_from_data, operands_to_data
from services.profiler import catalogue, roofline
from services.server.engine import Engine
from services.server.models import PRESETS, load_model
from services.server.vocab_sweep import sweep

NAMES = list(ops.FAMILIES)
KINDS = ("module_class", "layer", "function")

# What the services call on every family's op (`services.ops.family(name)`), and where.
OP_MEMBERS = (
    "FAMILY", "KIND", "VARIANTS", "WRITABLE", "ENTRYPOINT", "ENTRY_PARAMS",
    "ARG_ROLES",  # core/candidate_check: the dataflow check's role of each plan argument
    "recognise",  # ops.recognise: the server asks every family what a live module computes
    "check_plan",  # core/candidate_check: the plan fits the family's vocabulary
    "make_forward",  # core/kernels.candidate_wrapper: what the server serves
    "timed_bytes",  # judge/timing_check: the bytes a timed shape moves
)  # fmt: skip
# ... and on a family of each kind besides.
KIND_MEMBERS = {
    "module_class": ("PARAM_KINDS", "OPTIONAL_PARAMS"),  # judge/service.family_contract: the wrapper's signature
    # judge/contract_check._check_layer, profiler/roofline.layer_op, server/profiling.family_roles
    "layer": ("PARAM_KINDS", "OPTIONAL_PARAMS", "roles_problem", "roles_of"),
    # ops.functions_in; judge/contract_check._check_function (the function's variant and roles, found by calling it)
    "function": ("recognised_functions", "recognise_call", "function_contract"),
}
# FamilyPhysics declares only ROOFLINE; server/routing asks every family's physics the rows of a timed shape, and the
# profiler a layer family's cost inside its layer (profiler/roofline.layer_op, _layer_target).
PHYSICS_MEMBERS = ("timed_rows",)
LAYER_PHYSICS_MEMBERS = ("KEPT", "kept_roles", "shape_roles", "layer_cost")

# The presets a live target is looked for in, these first (together they serve every family today); a family none of
# them serves is looked for in every other tiny preset before its behavioural tests fail.
FIRST_PRESETS = ("tiny-qwen2", "tiny-gpt2")
PROMPT, NEW_TOKENS = "Hello there", 4
EXAMPLES = 2  # hypothesis-drawn cases beyond the fixed ones: the fixed ones are the protocol's


def declared(proto: type) -> dict[str, object]:
    """What a Protocol class declares: its annotated attributes (None) and its methods (the function)."""
    names = dict.fromkeys(inspect.get_annotations(proto))
    names.update({n: v for n, v in vars(proto).items() if inspect.isfunction(v) and not n.startswith("_")})
    return names


def parameters(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


def missing(module, members) -> list[str]:
    return [m for m in members if not hasattr(module, m)]


# ---------------------------------------------------------------- structure


@pytest.mark.parametrize("name", NAMES)
def test_the_op_names_itself_its_kind_and_variants(name):
    fam = ops.family(name)
    assert not missing(fam, OP_MEMBERS), missing(fam, OP_MEMBERS)
    assert fam.FAMILY == name and fam.KIND in KINDS
    assert (fam.__doc__ or "").strip(), "the coder's LLM prompt quotes the op's docstring as its vocabulary"
    assert isinstance(fam.VARIANTS, tuple) and fam.VARIANTS and all(isinstance(v, str) and v for v in fam.VARIANTS)
    assert len(set(fam.VARIANTS)) == len(fam.VARIANTS)
    assert set(fam.WRITABLE) <= set(fam.VARIANTS), "a writable variant is one the family recognises"
    assert isinstance(fam.ENTRYPOINT, str) and fam.ENTRYPOINT and fam.ENTRY_PARAMS
    assert set(fam.ARG_ROLES.values()) <= set(kernel_dataflow.ROLES)
    assert all(callable(getattr(fam, m)) for m in ("recognise", "check_plan", "make_forward", "timed_bytes"))


@pytest.mark.parametrize("name", NAMES)
def test_the_op_has_what_the_services_call_on_its_kind(name):
    fam = ops.family(name)
    assert not missing(fam, KIND_MEMBERS[fam.KIND]), f"a {fam.KIND} family: {missing(fam, KIND_MEMBERS[fam.KIND])}"
    if fam.KIND != "function":
        assert set(fam.OPTIONAL_PARAMS) <= set(fam.ENTRY_PARAMS) and set(fam.PARAM_KINDS) <= set(fam.ENTRY_PARAMS)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    ("proto", "reach"),
    [
        (protocol.FamilyJudging, ops.judging),
        (protocol.FamilyTemplate, ops.template),
        (protocol.FamilyPhysics, ops.physics),
    ],
    ids=["judging", "template", "physics"],
)
def test_each_module_of_the_family_has_every_member_its_protocol_declares(name, proto, reach):
    module = reach(name)
    assert module.__name__ == f"services.ops.{name}.{reach.__name__}", "the registry reaches the family's own module"
    members = declared(proto)
    assert not missing(module, members), missing(module, members)
    for member, fn in members.items():  # a method is called by its protocol's parameter names
        if fn is not None:
            assert parameters(getattr(module, member)) == parameters(fn), f"{member}{inspect.signature(fn)}"


@pytest.mark.parametrize("name", NAMES)
def test_its_physics_has_what_the_server_and_profiler_ask_of_its_kind(name):
    physics = ops.physics(name)
    assert not missing(physics, PHYSICS_MEMBERS)
    assert physics.ROOFLINE in roofline.FAMILIES, "the profiler's roofline classes are the fingerprint's one-hot"
    if ops.family(name).KIND == "layer":
        assert not missing(physics, LAYER_PHYSICS_MEMBERS), missing(physics, LAYER_PHYSICS_MEMBERS)
        assert isinstance(physics.KEPT, str) and physics.KEPT


@pytest.mark.parametrize("name", NAMES)
def test_its_template_resolves_back_to_it_and_writes_each_writable_variant(name):
    fam, template = ops.family(name), ops.template(name)
    assert template.OP_FAMILY == name and ops.template_family(template.TEMPLATE) == name
    assert isinstance(template.VARIANTS, tuple)
    for variant in fam.WRITABLE:
        assert ops.family_of(variant) == name
        assert template.variant_for(variant) in template.VARIANTS, f"the template does not write {variant}"
    others = [v for other in NAMES if other != name for v in ops.family(other).VARIANTS]
    assert all(template.variant_for(v) is None for v in others), "a template writes its own family's variants only"
    if hasattr(template, "DISPATCH_ROWS"):  # a template dispatching by size combines two configs (the coder's step)
        assert callable(template.combine)
    assert catalogue.live()[NAMES.index(name)] == pb.FamilyCatalogue(family=name, writable=list(fam.WRITABLE))


def test_no_two_families_share_a_name_a_variant_a_template_or_an_entrypoint():
    """A variant is how the services find a family (ops.family_of(computes)), a template name how the coder finds the
    template of a judged config, an entrypoint how a contract names its wrapper: each must say one family."""
    for what in ("FAMILY", "ENTRYPOINT"):
        values = [getattr(ops.family(n), what) for n in NAMES]
        assert len(set(values)) == len(values), (what, values)
    templates = [ops.template(n).TEMPLATE for n in NAMES]
    assert len(set(templates)) == len(templates), templates
    variants = [v for n in NAMES for v in ops.family(n).VARIANTS]
    assert len(set(variants)) == len(variants), sorted(v for v in variants if variants.count(v) > 1)


def test_the_registry_names_what_it_does_not_hold():
    with pytest.raises(ops.UnknownFamily, match="known: " + ", ".join(sorted(NAMES))):
        ops.template("no_such_family")
    assert ops.template_family("") is None and ops.family_of("") is None


# ---------------------------------------------------------------- behaviour, on a live target


async def _capture(preset: str) -> pb.ProfileObservation:
    engine = Engine(load_model(preset, "cpu"))
    try:
        return await engine.capture_profile([PROMPT], NEW_TOKENS)
    finally:
        engine.close()


@functools.cache
def captured(preset: str) -> pb.ProfileObservation:
    """What the server records of a preset's classes as it serves (computes, roles, shapes, the input domain)."""
    return asyncio.run(_capture(preset))


@dataclass(frozen=True)
class Live:
    """A live target of the family and its template's first candidate for it, as the coder proposes it."""

    observed: pb.ProfileObservation
    profile: pb.ModuleClassProfile
    proposal: pb.CandidateProposed

    @property
    def target(self) -> protocol.LiveTarget:
        """The target as the judge reads it from the run log (services.judge.domain.live_target)."""
        class_path = self.profile.introspection.class_path
        return live_target(log_of(pb.ProfileCaptured(observed=self.observed, target_class=class_path)), class_path)


def _preset_of(name: str) -> tuple[str, pb.ProfileObservation, pb.ModuleClassProfile]:
    others = sorted(p for p in PRESETS if p.startswith("tiny-") and p not in FIRST_PRESETS)
    for preset in (*FIRST_PRESETS, *others):
        observed = captured(preset)
        found = [m for m in observed.modules if ops.family_of(m.computes) == name]
        if found:
            return preset, observed, found[0]
    pytest.fail(f"no tiny preset serves a module computing a variant of {name}: add one (services/server/models.py)")


def _profile_of(name: str) -> tuple[pb.ProfileObservation, pb.ModuleClassProfile]:
    return _preset_of(name)[1:]


@functools.cache
def live(name: str) -> Live:
    observed, profile = _profile_of(name)
    template = ops.template(name)
    contract = template.contract_for(profile.introspection, profile)
    shape = tuple(int(d) for d in profile.input_shape)
    config = template.search_configs(template.variant_for(profile.computes), shape[-1], live_shape=shape)[0]
    source, plan = template.render(config), template.plan(config)
    proposal = pb.CandidateProposed(
        candidate_id=f"{name}-first", target_class=profile.introspection.class_path, source=source,
        source_sha256=kernels.candidate_sha256(source, plan), contract=contract, config=config, plan=plan,
        origin="template", attempt=1,
    )  # fmt: skip
    return Live(observed, profile, proposal)


@pytest.mark.parametrize("name", NAMES)
def test_the_first_config_for_a_live_target_passes_the_static_and_contract_checks(name):
    fam, template, proposal = ops.family(name), ops.template(name), live(name).proposal
    assert template.valid(proposal.config) and proposal.plan.family == name
    static = check_candidate(proposal.source, proposal.plan)
    assert static.passed, [f"{f.rule_id}: {f.reason}" for f in static.findings]
    assert fam.check_plan(proposal.plan, check_kernel_source(proposal.source).kernels) == []
    assert proposal.contract.kind == fam.KIND and proposal.contract.entrypoint == fam.ENTRYPOINT
    checked = family_contract(fam, proposal.contract, live(name).profile.introspection)
    assert checked.passed, f"{checked.rule_id}: {checked.error}"
    # judgeable here: the interpreter draws both sides of each of its dispatch limits
    limits = [launch.max_rows for launch in proposal.plan.launches]
    assert undrawn_boundaries(limits, gpu=False, cpu_limit=ops.judging(name).CPU_BOUNDARY) == ""


@pytest.mark.parametrize("name", NAMES)
def test_its_judging_prepares_cases_whose_operands_cross_to_the_child_and_back(name):
    judging, target = ops.judging(name), live(name).target
    ask = JudgeAsk(live(name).proposal, target, gpu=False, examples=EXAMPLES, seed_base=7, cpu_max_rows=CPU_MAX_ROWS)
    drawn = judging.prepare(ask)
    assert isinstance(drawn, CaseSet) and drawn.cases and len(drawn.refs) == len(drawn.cases)
    assert all(ref is not None for ref in drawn.refs)
    for case in drawn.cases:  # what the judge's evidence reads of a case (services.ops.protocol.DrawnCase)
        assert case.name and isinstance(case.regime, str) and case.regime and all(int(d) > 0 for d in case.shape)
    assert drawn.width > 0 and drawn.live_shape and all(n > 0 for n in drawn.itemsizes)
    assert type(drawn.operands) is judging.Operands and dataclasses.is_dataclass(judging.Operands)
    blob = io.BytesIO()
    torch.save(operands_to_data(drawn.operands), blob)  # as the judge writes cases.pt, and the child reads it
    data = torch.load(io.BytesIO(blob.getvalue()), weights_only=True)
    again = operands_from_data(judging.Operands, data)
    for field in dataclasses.fields(judging.Operands):
        sent, read = getattr(drawn.operands, field.name), getattr(again, field.name)
        assert type(sent) is type(read) and _same(sent, read), field.name
    first = dataclasses.fields(judging.Operands)[0].name
    with pytest.raises(ValueError, match=judging.Operands.__name__):  # a field lost on the way is refused
        operands_from_data(judging.Operands, {k: v for k, v in data.items() if k != first})
    # the cases follow the seed: the same ask draws the same cases
    assert [c.name for c in judging.prepare(ask).cases] == [c.name for c in drawn.cases]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a.nan_to_num(), b.nan_to_num())
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.mark.parametrize("name", NAMES)
def test_its_subject_answers_every_case_within_its_reference_at_shapes_its_physics_counts(name, tmp_path):
    """The judge's parent prepares the job; the subject is built from it as the sandbox child builds it, in this
    process, and each case is run as production calls it (the child's guarded runs are the family's judge tests')."""
    fam, judging, physics, proposal = ops.family(name), ops.judging(name), ops.physics(name), live(name).proposal
    prepared = JudgeService(device="cpu", examples=EXAMPLES).prepare(proposal, live(name).target)
    job = json.loads(prepared.job.to_json("nonce", -1, {}))  # what the child is handed
    seed = f"seed_base {job['seed_base']}"
    names = sorted({launch.kernel for launch in proposal.plan.launches})
    loaded = kernels.load_kernels(kernels.write_source(tmp_path / "kernel", proposal.source), names)
    if fam.KIND == "function":  # the child's namespace of a function target is its module (as sandbox_child reads it)
        target = module_factory.import_function(job["class_path"])[0]
    else:
        target = module_factory.import_class(job["class_path"])
    operands = operands_from_data(judging.Operands, torch.load(io.BytesIO(prepared.blob), weights_only=True))
    context = ChildContext(
        job, target, proposal.plan, loaded, torch.empty, operands, torch.device("cpu"), proposal.contract
    )
    subject = judging.subject(context)
    assert subject.count == len(prepared.cases) == len(prepared.refs)
    for index, (case, ref) in enumerate(zip(prepared.cases, prepared.refs, strict=True)):
        run = subject.again(index, ghost=False)
        assert run.problem is None, f"{case.name}: {run.problem} ({seed})"
        assert run.output.dtype == ref.own.dtype and run.output.shape == ref.own.shape, case.name
        result = compare(run.output, ref.hi, ref.bound, ref.row_error)
        assert result.ok, f"{case.name}: {result.rule}: {result.detail} ({seed})"
    # the comparison bites: an answer off by more than itself is refused
    index, ref = next((i, r) for i, r in enumerate(prepared.refs) if r.hi.isfinite().all() and r.hi.abs().max() > 0)
    wrong = (ref.hi + ref.hi.abs() + 1).to(ref.own.dtype)
    assert not compare(wrong, ref.hi, ref.bound, ref.row_error).ok, prepared.cases[index].name
    _oracle, _candidate, shapes = subject.timed()
    assert shapes
    for shape in shapes:
        assert physics.timed_rows(tuple(shape)) > 0 and fam.timed_bytes(list(shape), prepared.itemsizes) > 0, shape


@pytest.mark.parametrize("name", NAMES)
def test_the_profiler_ranks_its_live_target_as_one_its_catalogue_writes(name):
    """Ranked through the family's physics, against the catalogue the profiler records (every family's writable
    variants): a layer's cost inside its layer, the others' roofline class."""
    observed = pb.ProfileObservation()
    observed.CopyFrom(live(name).observed)
    observed.catalogue.extend(catalogue.live())
    profile = live(name).profile
    [ranked] = [t for t in roofline.rank(observed) if t.class_path == profile.introspection.class_path]
    assert ranked.supported, ranked.note
    if ops.family(name).KIND == "layer":
        op = roofline.layer_op(profile)
        assert op is not None and op.physics.bytes > 0 and op.physics.flops > 0
        shapes = {c.name: tuple(c.shape) for c in profile.introspection.children}
        roles = ops.physics(name).shape_roles(profile.roles)
        elem = roofline.dtype_bytes(profile.dtype)
        cost = ops.physics(name).layer_cost(profile, {r: shapes[profile.roles[r]] for r in roles}, elem)
        assert isinstance(cost, LayerCost) and cost.width > 0 and cost.rows > 0
        assert f"({name} rewrite)" in ranked.note
    else:
        assert ranked.fingerprint.op_family == ops.physics(name).ROOFLINE


@pytest.mark.parametrize("name", NAMES)
def test_its_first_candidate_passes_the_vocabulary_sweep_on_its_live_model(name, tmp_path):
    # the server's sweep before a patch (services.server.vocab_sweep) reaches the family's target wherever it sits: a
    # leaf module, a layer it rewrites whole, a modeling file's function; an honest kernel is right on every token
    preset, proposal = _preset_of(name)[0], live(name).proposal
    engine = Engine(load_model(preset, "cpu"))
    try:
        entry = kernels.candidate_wrapper(tmp_path, proposal.source, proposal.plan)
        observed = pb.ParityObservation()
        asyncio.run(sweep(engine, proposal.contract, kernels.bind(proposal.contract, entry), 0, observed))
    finally:
        engine.close()
    assert observed.sweep_tokens == engine.loaded.vocab_size and observed.sweep_calls_checked > 0
    assert observed.sweep_calls_passed == observed.sweep_calls_checked, list(observed.sweep_wrong_tokens)
