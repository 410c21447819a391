"""Building an instance of a live module class from its recorded introspection.

The judge builds one on the meta device to check a contract (no memory, no weights); the
sandbox child builds a real one on the device to serve as the correctness oracle.
"""

from __future__ import annotations

import importlib
import inspect

import torch

from services.core.pb import events_pb2 as pb
from services.ops.hub_functions import plain_function

# The __init__ parameters a module class takes its width and its epsilon by (HF norms, torch's LayerNorm, ...).
EPS_INIT_PARAMS = ("eps", "variance_epsilon", "epsilon", "layer_norm_eps", "rms_norm_eps", "norm_eps")
WIDTH_INIT_PARAMS = ("hidden_size", "dim", "normalized_shape", "d_model", "size", "hidden_dim", "n_embd")


class ModuleBuildError(ValueError):
    """The live module class cannot be imported or constructed from what the introspection recorded."""


def torch_dtype(name: str) -> torch.dtype:
    """The floating torch dtype named "bfloat16" or "torch.bfloat16"; ModuleBuildError for anything else."""
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ModuleBuildError(f"{name!r} is not a floating torch dtype")
    return dtype


def _import(path: str, form: str):
    """(the Python module, the attribute's name) of a dotted path of the form package.module.`form`."""
    module_name, _, name = path.rpartition(".")
    if not module_name:
        raise ModuleBuildError(f"{form.lower()} path {path!r} is not of the form package.module.{form}")
    try:
        return importlib.import_module(module_name), name
    except Exception as exc:  # any import failure is the same answer: this target cannot be checked here
        raise ModuleBuildError(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from exc


def import_class(class_path: str) -> type[torch.nn.Module]:
    module, class_name = _import(class_path, "Class")
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise ModuleBuildError(f"{class_path} is not a torch.nn.Module class")
    return cls


def import_function(path: str):
    """(the Python module, the function) of a dotted function path; ModuleBuildError when it is not one."""
    module, name = _import(path, "function")
    fn = plain_function(getattr(module, name, None))  # a hub-kernel function module: the function it wraps
    if fn is None:
        raise ModuleBuildError(f"{path} is not a function")
    return module, fn


def tensor_binding(contract: pb.Contract) -> pb.Binding | None:
    """The bound weight: the binding of the wrapper's `weight` (the first tensor binding in older contracts)."""
    named = next((b for b in contract.bindings if b.kind == "tensor" and b.param == "weight"), None)
    return named or next((b for b in contract.bindings if b.kind == "tensor" and b.param != "bias"), None)


def bias_binding(contract: pb.Contract) -> pb.Binding | None:
    """A LayerNorm's bound bias (None where the contract binds none)."""
    return next((b for b in contract.bindings if b.kind == "tensor" and b.param == "bias"), None)


def module_state_attrs(intro: pb.ModuleIntrospection, contract: pb.Contract) -> tuple[str, str | None]:
    """(weight, bias) attributes of the live module by its own names, whatever the contract binds: the judge draws
    every one of them at random for each case and sets them by these names on the oracle and on the instance the
    candidate is called with. A contract that leaves the bias unbound, or binds the weight to the bias, then reads
    other values than the module's forward does, and fails (with the module's init values — zero bias, unit weight —
    both would have read the same). The bias is None where the module has none of the weight's shape."""
    tensors = {a.name: tuple(a.shape) for a in intro.attributes if a.kind in ("parameter", "tensor")}
    bound = tensor_binding(contract)
    weight = "weight" if "weight" in tensors else (bound.attr if bound else "weight")
    bias = "bias" if "bias" in tensors and tensors["bias"] == tensors.get(weight) else None
    return weight, bias


def float_binding(contract: pb.Contract) -> pb.Binding | None:
    return next((b for b in contract.bindings if b.kind == "float"), None)


def width_and_eps(intro: pb.ModuleIntrospection, contract: pb.Contract) -> tuple[int, float | None]:
    """The normalised width (last dim of the bound weight) and the live epsilon (None when unbound)."""
    attrs = {a.name: a for a in intro.attributes}
    weight = tensor_binding(contract)
    if weight is None or weight.attr not in attrs or not attrs[weight.attr].shape:
        raise ModuleBuildError(f"the introspection of {intro.class_path} records no shape for the bound weight")
    eps = float_binding(contract)
    eps_value = attrs[eps.attr].value if eps is not None and eps.attr in attrs else None
    return int(attrs[weight.attr].shape[-1]), eps_value


def init_kwargs(cls: type, width: int, eps: float | None) -> dict:
    """Arguments for cls.__init__: width-like and eps-like parameters filled in, others left at defaults."""
    try:
        signature = inspect.signature(cls.__init__)
    except (TypeError, ValueError) as exc:
        raise ModuleBuildError(f"cannot read the signature of {cls.__qualname__}.__init__: {exc}") from exc
    kwargs: dict = {}
    for name, param in list(signature.parameters.items())[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name in WIDTH_INIT_PARAMS:
            kwargs[name] = width
        elif name in EPS_INIT_PARAMS and eps is not None:
            kwargs[name] = eps
        elif param.default is param.empty:
            raise ModuleBuildError(
                f"cannot construct {cls.__qualname__}: __init__ needs {name!r}, which the introspection does not give"
            )
    return kwargs


def build(
    cls: type, width: int, eps: float | None, eps_attr: str | None, device: str | torch.device
) -> torch.nn.Module:
    """An instance of `cls` of the given width on `device`, its epsilon attribute set to the live value."""
    kwargs = init_kwargs(cls, width, eps)
    try:
        with torch.device(device):
            instance = cls(**kwargs)
    except Exception as exc:  # the class's own constructor: report it, never crash the judge
        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise ModuleBuildError(f"{cls.__qualname__}({args}) failed: {type(exc).__name__}: {exc}") from exc
    if eps_attr and eps is not None and hasattr(instance, eps_attr):
        setattr(instance, eps_attr, eps)  # a constructor that ignores or renames eps still gets the live value
    return instance
