"""The contract layer: does the candidate's entrypoint plug into the live module class as declared?

The live class is built on the meta device (no memory, no weights) from the recorded
introspection; the candidate is never executed here: its entrypoint signature is read from the AST.
"""

from __future__ import annotations

import ast

import torch

from services.core.pb import events_pb2 as pb
from services.judge.module_factory import ModuleBuildError, build, float_binding, import_class, width_and_eps

SUPPORTED_KINDS = ("module_class",)


class ContractError(ValueError):
    """The candidate or its contract does not fit the live module."""


def entry_params(source: str, entrypoint: str) -> list[str]:
    """The parameter names of top-level `def entrypoint(...)` in `source`, read without running it."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        raise ContractError(f"the source does not parse: {exc}") from exc
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entrypoint), None)
    if fn is None:
        raise ContractError(f"the source defines no top-level function {entrypoint!r}")
    if fn.args.vararg or fn.args.kwarg:
        raise ContractError(f"{entrypoint} takes *args/**kwargs; its parameters must be named")
    return [a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]]


def _kind_fits(kind: str, value: object) -> bool:
    if kind == "tensor":
        return isinstance(value, torch.Tensor)
    if kind == "float":
        return isinstance(value, (float, int)) and not isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    return False


def _check(contract: pb.Contract, intro: pb.ModuleIntrospection, params: list[str], checks: list[str]) -> None:
    """Appends each check that passed to `checks`; raises ContractError at the first that fails."""
    if contract.kind not in SUPPORTED_KINDS:
        raise ContractError(f"contract kind {contract.kind!r} is not supported (only {', '.join(SUPPORTED_KINDS)})")
    if contract.target != intro.class_path:
        raise ContractError(f"the contract targets {contract.target!r} but the live class is {intro.class_path!r}")
    checks.append(f"targets {intro.class_path}")
    if list(contract.inputs) != list(intro.forward_params):
        raise ContractError(
            f"inputs ({', '.join(contract.inputs)}) are not the forward's parameters "
            f"({', '.join(intro.forward_params)})"
        )
    checks.append(f"inputs = forward({', '.join(contract.inputs)})")

    recorded = {a.name: a for a in intro.attributes}
    for binding in contract.bindings:
        if binding.attr not in recorded:
            raise ContractError(
                f"binding {binding.param} -> {binding.attr}: the live module has no attribute {binding.attr!r} "
                f"(it has {', '.join(sorted(recorded)) or 'none recorded'})"
            )
    width, eps = width_and_eps(intro, contract)
    eps_binding = float_binding(contract)
    instance = build(import_class(intro.class_path), width, eps, eps_binding.attr if eps_binding else None, "meta")
    checks.append(f"built {type(instance).__name__} of width {width} on meta")
    children = [name for name, _ in instance.named_children()]
    if children:
        raise ContractError(
            f"{intro.class_path} has child modules ({', '.join(children)}); a module_class must be a leaf"
        )
    checks.append("leaf module")

    for binding in contract.bindings:
        if not hasattr(instance, binding.attr):
            raise ContractError(
                f"binding {binding.param} -> {binding.attr}: the module has no attribute {binding.attr!r}"
            )
        value = getattr(instance, binding.attr)
        if not _kind_fits(binding.kind, value):
            raise ContractError(
                f"binding {binding.param} -> {binding.attr}: a {type(value).__name__}, not kind {binding.kind!r}"
            )
        if binding.kind == "tensor" and binding.attr in recorded:
            live_shape = list(recorded[binding.attr].shape)
            if list(value.shape) != live_shape:
                raise ContractError(f"{binding.attr} builds as {list(value.shape)} but the live one is {live_shape}")
        checks.append(f"binding {binding.param} -> {binding.attr} ({binding.kind})")

    declared = list(contract.inputs) + [b.param for b in contract.bindings]
    if len(set(declared)) != len(declared):
        raise ContractError(f"the contract names a parameter twice: {declared}")
    if sorted(params) != sorted(declared):
        missing = sorted(set(declared) - set(params))
        extra = sorted(set(params) - set(declared))
        raise ContractError(
            f"{contract.entrypoint}({', '.join(params)}) does not take exactly the inputs and bound params: "
            f"missing {missing}, unexpected {extra}"
        )
    checks.append(f"{contract.entrypoint}({', '.join(params)}) = inputs + bound params")


def check_contract(
    contract: pb.Contract, intro: pb.ModuleIntrospection, entry_signature_params: list[str]
) -> pb.ContractEvidence:
    """The contract evidence: every check that ran, and the first failure as `error`."""
    checks: list[str] = []
    try:
        _check(contract, intro, entry_signature_params, checks)
    except (ContractError, ModuleBuildError) as exc:
        return pb.ContractEvidence(passed=False, checks=checks, error=str(exc))
    return pb.ContractEvidence(passed=True, checks=checks)


def check_candidate_contract(source: str, contract: pb.Contract, intro: pb.ModuleIntrospection) -> pb.ContractEvidence:
    """check_contract with the entrypoint's parameters read from `source`."""
    try:
        params = entry_params(source, contract.entrypoint)
    except ContractError as exc:
        return pb.ContractEvidence(passed=False, error=str(exc))
    return check_contract(contract, intro, params)
