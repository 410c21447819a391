"""The contract layer: does the op family's wrapper plug into the live module class as declared?

The live class is built on the meta device (no memory, no weights) from the recorded
introspection; nothing runs. The entrypoint is the family's wrapper (services.ops), whose
parameters and their kinds the family declares: the contract's inputs and bindings must be exactly
those, and every binding must name real state of the live class. Each failure carries a rule id
(CONTRACT_RULES).
"""

from __future__ import annotations

import torch

from services.core.pb import events_pb2 as pb
from services.judge.module_factory import (
    ModuleBuildError,
    build,
    float_binding,
    import_class,
    import_function,
    width_and_eps,
)

SUPPORTED_KINDS = ("module_class", "layer", "function")

CONTRACT_RULES: dict[str, str] = {
    "contract-kind": "the contract kind must be its family's and one the judge checks (module_class, layer, function)",
    "contract-target": "the contract must target the live class the profiler saw",
    "contract-inputs": "the contract's inputs must be exactly the live forward's parameters, in order",
    "module-build": "the live class must import and build on the meta device from its introspection",
    "not-leaf": "a module_class target must be a leaf module (no children to bypass)",
    "binding-missing": "every binding must name an attribute the live module really has",
    "binding-not-state": "a binding must name instance state set in __init__ (a parameter, buffer or attribute)",
    "binding-kind": "a binding's kind must fit the attribute: a tensor where a tensor is, a float where eps is",
    "binding-shape": "a bound tensor must build with the live shape",
    "entry-signature": "the entrypoint is the family's wrapper and takes exactly the inputs and bound parameters",
    "entry-param-kind": "each parameter must be bound as the kind the family's wrapper takes it",
    "binding-roles": "a layer's bound children must have the shapes the parts they are bound as need",
}
# Recorded introspection kinds that each binding kind may bind to.
_RECORDED_KINDS = {"tensor": ("tensor", "parameter", "buffer"), "float": ("float",), "int": ("int",)}


class ContractError(ValueError):
    """The candidate or its contract does not fit the live module."""

    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.rule = rule


def _kind_fits(kind: str, value: object) -> bool:
    if kind == "tensor":
        return isinstance(value, torch.Tensor)
    if kind == "float":
        return isinstance(value, (float, int)) and not isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    return False


def _instance_state(instance: torch.nn.Module) -> set[str]:
    """Names set on the instance (in __init__): its parameters, buffers and public attributes."""
    names = {n for n in vars(instance) if not n.startswith("_") and n != "training"}
    return names | set(instance._parameters) | set(instance._buffers)


def _target_and_inputs(contract: pb.Contract, intro: pb.ModuleIntrospection, checks: list[str], what: str) -> None:
    """The contract targets what the profiler saw and takes its parameters, in order (`what`: "class" or
    "function", as the reasons name it)."""
    if contract.target != intro.class_path:
        raise ContractError(
            "contract-target", f"the contract targets {contract.target!r} but the live {what} is {intro.class_path!r}"
        )
    checks.append(f"targets {intro.class_path}")
    name = "forward" if what == "class" else intro.class_path.rsplit(".", 1)[-1]
    if list(contract.inputs) != list(intro.forward_params):
        owner = "the forward's" if what == "class" else "the function's"
        raise ContractError(
            "contract-inputs",
            f"inputs ({', '.join(contract.inputs)}) are not {owner} parameters ({', '.join(intro.forward_params)})",
        )
    checks.append(f"inputs = {name}({', '.join(contract.inputs)})")


def _check(
    contract: pb.Contract,
    intro: pb.ModuleIntrospection,
    params: list[str],
    uses: dict[str, str],
    checks: list[str],
    optional: tuple[str, ...] = (),
) -> None:
    """Appends each check that passed to `checks`; raises ContractError at the first that fails."""
    if contract.kind != "module_class":
        raise ContractError(
            "contract-kind",
            f"contract kind {contract.kind!r} is not the family's (module_class; the judge checks "
            f"{', '.join(SUPPORTED_KINDS)})",
        )
    _target_and_inputs(contract, intro, checks, "class")

    recorded = {a.name: a for a in intro.attributes}
    for binding in contract.bindings:
        if binding.attr not in recorded:
            raise ContractError(
                "binding-missing",
                f"binding {binding.param} -> {binding.attr}: the live module has no attribute {binding.attr!r} "
                f"(it has {', '.join(sorted(recorded)) or 'none recorded'})",
            )
        if recorded[binding.attr].kind not in _RECORDED_KINDS.get(binding.kind, ()):
            raise ContractError(
                "binding-kind",
                f"binding {binding.param} -> {binding.attr}: the live attribute is a {recorded[binding.attr].kind}, "
                f"not kind {binding.kind!r}",
            )
    try:
        width, eps = width_and_eps(intro, contract)
        eps_binding = float_binding(contract)
        cls = import_class(intro.class_path)
        instance = build(cls, width, eps, eps_binding.attr if eps_binding else None, "meta")
    except ModuleBuildError as exc:
        raise ContractError("module-build", str(exc)) from exc
    checks.append(f"built {type(instance).__name__} of width {width} on meta")
    children = [name for name, _ in instance.named_children()]
    if children:
        raise ContractError(
            "not-leaf", f"{intro.class_path} has child modules ({', '.join(children)}); a module_class must be a leaf"
        )
    checks.append("leaf module")

    state = _instance_state(instance)
    for binding in contract.bindings:
        where = f"binding {binding.param} -> {binding.attr}"
        if not hasattr(instance, binding.attr):
            raise ContractError("binding-missing", f"{where}: the module has no attribute {binding.attr!r}")
        if binding.attr not in state:
            raise ContractError(
                "binding-not-state", f"{where}: {binding.attr!r} is not set in __init__ (a method or class attribute)"
            )
        value = getattr(instance, binding.attr)
        if not _kind_fits(binding.kind, value):
            raise ContractError("binding-kind", f"{where}: a {type(value).__name__}, not kind {binding.kind!r}")
        if binding.kind == "tensor":
            live_shape = list(recorded[binding.attr].shape)
            if list(value.shape) != live_shape:
                raise ContractError("binding-shape", f"{binding.attr} builds as {list(value.shape)}, live {live_shape}")
        checks.append(f"binding {binding.param} -> {binding.attr} ({binding.kind})")

    # The entrypoint's names for the inputs: the forward's own, or those `entry_inputs` maps them to by position.
    entry_names = list(contract.entry_inputs) or list(contract.inputs)
    if len(entry_names) != len(contract.inputs):
        raise ContractError(
            "entry-signature", f"entry_inputs {list(contract.entry_inputs)} do not map inputs {list(contract.inputs)}"
        )
    declared = entry_names + [b.param for b in contract.bindings]
    if len(set(declared)) != len(declared):
        raise ContractError("entry-signature", f"the contract names a parameter twice: {declared}")
    missing = sorted(set(declared) - set(params))
    extra = sorted(set(params) - set(declared) - set(optional))  # an optional parameter may go unbound
    if missing or extra:
        raise ContractError(
            "entry-signature",
            f"{contract.entrypoint}({', '.join(params)}) does not take exactly the inputs and bound params: "
            f"missing {missing}, unexpected {extra}",
        )
    taken = [p for p in params if p in declared]
    checks.append(f"{contract.entrypoint}({', '.join(taken)}) = inputs + bound params")

    expected = {name: "tensor" for name in entry_names} | {b.param: b.kind for b in contract.bindings}
    for name, kind in expected.items():
        used = uses.get(name)
        if used is not None and (used == "tensor") != (kind == "tensor"):
            raise ContractError(
                "entry-param-kind", f"{contract.entrypoint} uses {name} as a {used} but it is bound to a {kind}"
            )
    checks.append("each parameter is used as the kind bound to it")


def _family_kind(contract: pb.Contract, ops) -> None:
    if contract.kind != ops.KIND:
        raise ContractError(
            "contract-kind", f"a {ops.FAMILY} candidate is a {ops.KIND!r} contract, not {contract.kind!r}"
        )


def _check_layer(contract: pb.Contract, intro: pb.ModuleIntrospection, ops, checks: list[str]) -> None:
    """A layer contract (the module's forward rewritten around children it keeps): its target and inputs, each
    binding a recorded child module, their shapes fitting the roles (the family says), the wrapper's signature."""
    _family_kind(contract, ops)
    _target_and_inputs(contract, intro, checks, "class")
    try:
        import_class(intro.class_path)
    except ModuleBuildError as exc:
        raise ContractError("module-build", str(exc)) from exc
    children = {c.name: c for c in intro.children}
    shapes = {}
    for binding in contract.bindings:
        if binding.kind != "module" or ops.PARAM_KINDS.get(binding.param) != "module":
            raise ContractError(
                "binding-kind", f"binding {binding.param} -> {binding.attr}: a layer binds child modules"
            )
        if binding.attr not in children:
            raise ContractError(
                "binding-missing",
                f"binding {binding.param} -> {binding.attr}: {intro.class_path} has no child {binding.attr!r} "
                f"(it has {', '.join(sorted(children)) or 'none recorded'})",
            )
        shapes[binding.param] = tuple(children[binding.attr].shape)
        checks.append(f"binding {binding.param} -> {binding.attr} (child {list(children[binding.attr].shape)})")
    problem = ops.roles_problem(shapes)
    if problem:
        raise ContractError("binding-roles", problem)
    checks.append("the bound children's shapes fit their roles")
    entry_names = list(contract.entry_inputs) or list(contract.inputs)
    inputs = list(contract.inputs)
    if getattr(ops, "PASSES_INPUTS", False):  # a decoder layer's: its first input, the rest passed to its children
        entry_names, inputs = entry_names[:1], inputs[:1]
    declared = entry_names + [b.param for b in contract.bindings]
    required = set(ops.ENTRY_PARAMS) - set(ops.OPTIONAL_PARAMS)  # the optional: one form's roles or another's
    fits = len(set(declared)) == len(declared) and required <= set(declared) <= set(ops.ENTRY_PARAMS)
    if not fits or len(entry_names) != len(inputs):
        raise ContractError(
            "entry-signature",
            f"{contract.entrypoint}({', '.join(ops.ENTRY_PARAMS)}) does not take exactly the inputs and bound "
            f"children ({', '.join(declared)})",
        )
    checks.append(f"{contract.entrypoint}({', '.join(ops.ENTRY_PARAMS)}) = inputs + bound children")


def _check_function(contract: pb.Contract, intro: pb.ModuleIntrospection, ops, checks: list[str]) -> None:
    """A function contract (a modeling file's global swapped whole): its target and parameters, importable as a
    function, no bindings, its parameters the wrapper's by position (q, k, cos, sin) or by the roles a function of
    one tensor's play (x as q, cos, sin)."""
    _family_kind(contract, ops)
    _target_and_inputs(contract, intro, checks, "function")
    try:
        _, fn = import_function(intro.class_path)
    except ModuleBuildError as exc:
        raise ContractError("module-build", str(exc)) from exc
    import inspect

    takes = list(inspect.signature(fn).parameters)
    if takes != list(contract.inputs):
        raise ContractError("contract-inputs", f"{intro.class_path} takes ({', '.join(takes)})")
    checks.append("the function imports with those parameters")
    if contract.bindings:
        raise ContractError(
            "binding-kind", "a function contract binds nothing: the function's arguments are all it has"
        )
    # the parameters' roles found again here, by running the function (one tensor or q and k): never the
    # proposal's word for how the wrapper is called
    found = ops.recognise_call(fn)
    expected = ops.function_contract(intro.class_path, takes, found.roles if found else {})
    entry = list(contract.entry_inputs) or list(contract.inputs)
    if expected is None or entry != (list(expected.entry_inputs) or list(expected.inputs)):
        want = ", ".join(expected.entry_inputs or expected.inputs) if expected else "nothing the wrapper takes"
        raise ContractError(
            "entry-signature",
            f"{contract.entrypoint}({', '.join(ops.ENTRY_PARAMS)}) is called with ({', '.join(entry)}) for the "
            f"function's parameters; what they are: ({want})",
        )
    checks.append(f"{contract.entrypoint}({', '.join(entry)}) = the function's parameters")


def _evidence(check, *args, **kwargs) -> pb.ContractEvidence:
    """Run `check(*args, checks, **kwargs)`: every check that passed, and the first failure as `error` with its
    `rule_id`."""
    checks: list[str] = []
    try:
        check(*args, checks, **kwargs)
    except ContractError as exc:
        return pb.ContractEvidence(passed=False, checks=checks, error=str(exc), rule_id=exc.rule)
    return pb.ContractEvidence(passed=True, checks=checks)


def check_function_contract(contract: pb.Contract, intro: pb.ModuleIntrospection, ops) -> pb.ContractEvidence:
    """The evidence of a function contract against the live function and the op family `ops`."""
    return _evidence(_check_function, contract, intro, ops)


def check_layer_contract(contract: pb.Contract, intro: pb.ModuleIntrospection, ops) -> pb.ContractEvidence:
    """The evidence of a layer contract against the live class and the op family `ops` (its wrapper and roles)."""
    return _evidence(_check_layer, contract, intro, ops)


def check_contract(
    contract: pb.Contract,
    intro: pb.ModuleIntrospection,
    entry_signature_params: list[str],
    uses: dict[str, str] | None = None,
    optional: tuple[str, ...] = (),
) -> pb.ContractEvidence:
    """The contract evidence: every check that ran, and the first failure as `error` with its `rule_id`."""
    return _evidence(_check, contract, intro, entry_signature_params, uses or {}, optional=optional)
