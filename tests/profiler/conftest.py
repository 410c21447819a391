"""Helpers for the profiler tests: profiles of LIVE modules taken with plain forward hooks.

The real server profiles the same way (written in parallel, not imported here): per module class,
inclusive host time between a pre-hook and a hook, the most frequent input shape, mean bytes per call.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import pytest
import torch
from runlog import wait_for_log

from services.core.pb import events_pb2 as pb


def class_path(module: torch.nn.Module) -> str:
    return f"{type(module).__module__}.{type(module).__qualname__}"


def _dtype(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def introspect(module: torch.nn.Module) -> pb.ModuleIntrospection:
    attrs = [
        pb.ModuleAttribute(name=n, kind="parameter", shape=list(p.shape), dtype=_dtype(p.dtype))
        for n, p in module.named_parameters(recurse=False)
    ]
    attrs += [
        pb.ModuleAttribute(name=n, kind="tensor", shape=list(b.shape), dtype=_dtype(b.dtype))
        for n, b in module.named_buffers(recurse=False)
    ]
    for name, value in sorted(vars(module).items()):
        if name.startswith("_") or name == "training":
            continue
        if isinstance(value, bool):
            attrs.append(pb.ModuleAttribute(name=name, kind="bool", value=float(value)))
        elif isinstance(value, int):
            attrs.append(pb.ModuleAttribute(name=name, kind="int", value=float(value)))
        elif isinstance(value, float):
            attrs.append(pb.ModuleAttribute(name=name, kind="float", value=value))
    return pb.ModuleIntrospection(
        class_path=class_path(module), attributes=attrs, leaf=not any(True for _ in module.children())
    )


def _first_tensor(values):
    if isinstance(values, torch.Tensor):
        return values
    if isinstance(values, dict):
        values = list(values.values())
    if isinstance(values, (tuple, list)):
        return next((v for v in values if isinstance(v, torch.Tensor)), None)
    return None


def _nbytes(t) -> int:
    return 0 if t is None else t.numel() * t.element_size()


class ClassProfiler:
    """`with ClassProfiler(model) as p: model(...)`, then `p.results()`: one ModuleClassProfile per class."""

    def __init__(self, model: torch.nn.Module, int_dtype_as_is: bool = False):
        self.model = model
        self.int_dtype_as_is = int_dtype_as_is  # report an embedding's int64 input dtype instead of its weights'
        self.modules: dict[str, list[torch.nn.Module]] = defaultdict(list)
        self.calls: Counter = Counter()
        self.time_us: Counter = Counter()
        self.shapes: dict[str, Counter] = defaultdict(Counter)
        self.dtypes: dict[str, Counter] = defaultdict(Counter)
        self.in_bytes: Counter = Counter()
        self.out_bytes: Counter = Counter()
        self._starts: dict[int, list] = defaultdict(list)
        self._handles: list = []

    def __enter__(self) -> ClassProfiler:
        for m in self.model.modules():
            self.modules[class_path(m)].append(m)
            self._handles.append(m.register_forward_pre_hook(self._pre, with_kwargs=True))
            self._handles.append(m.register_forward_hook(self._post, with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()

    def _pre(self, module, args, kwargs):
        first = _first_tensor(args)
        if first is None:
            first = _first_tensor(list(kwargs.values()))
        self._starts[id(module)].append((first, time.perf_counter()))

    def _post(self, module, args, kwargs, output):
        first, start = self._starts[id(module)].pop()
        key = class_path(module)
        self.calls[key] += 1
        self.time_us[key] += (time.perf_counter() - start) * 1e6
        if first is not None:
            self.shapes[key][tuple(first.shape)] += 1
            self.dtypes[key][first.dtype] += 1
        self.in_bytes[key] += _nbytes(first)
        self.out_bytes[key] += _nbytes(_first_tensor(output))

    def _dtype_of(self, key: str) -> str:
        seen = [d for d, _ in self.dtypes[key].most_common()]
        floating = [d for d in seen if d.is_floating_point]
        if floating:
            return _dtype(floating[0])
        if seen and self.int_dtype_as_is:
            return _dtype(seen[0])
        params = [p for m in self.modules[key] for p in m.parameters(recurse=False)]
        return _dtype(params[0].dtype) if params else (_dtype(seen[0]) if seen else "")

    def results(self) -> list[pb.ModuleClassProfile]:
        out = []
        for key, mods in self.modules.items():
            calls = self.calls[key]
            shape = self.shapes[key].most_common(1)[0][0] if self.shapes[key] else ()
            out.append(
                pb.ModuleClassProfile(
                    introspection=introspect(mods[0]),
                    instances=len(mods),
                    calls=calls,
                    total_time_us=self.time_us[key],
                    input_shape=list(shape),
                    dtype=self._dtype_of(key),
                    param_bytes=round(sum(_nbytes(p) for m in mods for p in m.parameters()) / len(mods)),
                    input_bytes=round(self.in_bytes[key] / calls) if calls else 0,
                    output_bytes=round(self.out_bytes[key] / calls) if calls else 0,
                )
            )
        return out


def profile_module(module: torch.nn.Module, *inputs, int_dtype_as_is: bool = False) -> pb.ModuleClassProfile:
    """The profile of `module`'s own class after one forward on `inputs`."""
    with ClassProfiler(module, int_dtype_as_is) as prof, torch.no_grad():
        module(*inputs)
    return next(p for p in prof.results() if p.introspection.class_path == class_path(module))


@pytest.fixture
def profile_of():
    return profile_module


@pytest.fixture
def class_profiler():
    return ClassProfiler


@pytest.fixture
def wait_log():
    return wait_for_log
