"""What a live module class looks like: its importable path, attributes with live values, forward's params."""

from __future__ import annotations

import importlib
import inspect

import torch

from services.core.pb import events_pb2 as pb

# Every nn.Module has these; they say nothing about the op.
_SKIPPED_ATTRIBUTES = {"training", "call_super_init", "dump_patches"}


def class_path(module_or_class) -> str:
    cls = module_or_class if isinstance(module_or_class, type) else type(module_or_class)
    return f"{cls.__module__}.{cls.__qualname__}"


def import_class(path: str) -> type:
    """Import "package.module.Qualname" (the inverse of class_path); raises ImportError naming the path."""
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            continue
        if isinstance(obj, type):
            return obj
    raise ImportError(f"{path!r} does not name an importable class")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def forward_params(cls: type) -> list[str]:
    """forward's parameter names without self; *args and **kwargs keep their stars so nobody binds to them."""
    try:
        sig = inspect.signature(cls.forward)
    except (TypeError, ValueError):
        return []
    out = []
    for i, p in enumerate(sig.parameters.values()):
        if i == 0 and p.name == "self":
            continue
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        out.append(prefix + p.name)
    return out


def _attributes(module: torch.nn.Module) -> list[pb.ModuleAttribute]:
    out = []
    for name, p in module.named_parameters(recurse=False):
        out.append(pb.ModuleAttribute(name=name, kind="parameter", shape=list(p.shape), dtype=dtype_name(p.dtype)))
    for name, b in module.named_buffers(recurse=False):
        out.append(pb.ModuleAttribute(name=name, kind="tensor", shape=list(b.shape), dtype=dtype_name(b.dtype)))
    for name, value in sorted(vars(module).items()):
        if name.startswith("_") or name in _SKIPPED_ATTRIBUTES:
            continue
        if isinstance(value, bool):  # before int: bool is an int
            out.append(pb.ModuleAttribute(name=name, kind="bool", value=float(value)))
        elif isinstance(value, int):
            out.append(pb.ModuleAttribute(name=name, kind="int", value=float(value)))
        elif isinstance(value, float):
            out.append(pb.ModuleAttribute(name=name, kind="float", value=value))
    return out


def _children(module: torch.nn.Module) -> list[pb.ModuleAttribute]:
    """Its direct children (kind "module"), each with its weight's shape and dtype where it has one: a linear
    map's 2-D, a norm's 1-D."""
    out = []
    for name, child in module.named_children():
        weight = getattr(child, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dim() in (1, 2):
            out.append(
                pb.ModuleAttribute(name=name, kind="module", shape=list(weight.shape), dtype=dtype_name(weight.dtype))
            )
        else:
            out.append(pb.ModuleAttribute(name=name, kind="module"))
    return out


def introspect_module(module: torch.nn.Module) -> pb.ModuleIntrospection:
    """Introspection of `module`'s class, with the live values of this instance."""
    cls = type(module)
    children = _children(module)
    return pb.ModuleIntrospection(
        class_path=class_path(cls),
        attributes=_attributes(module),
        forward_params=forward_params(cls),
        leaf=not children,
        children=children,
    )


def instances_of(model: torch.nn.Module, path: str) -> list[torch.nn.Module]:
    """Every instance in `model` whose exact class is `path` (subclasses are other classes)."""
    return [m for m in model.modules() if class_path(m) == path]
