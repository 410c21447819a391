"""Per-class timing of a live model's forward passes through module hooks.

Inclusive time per call is taken between a forward pre-hook and a forward hook: on a GPU with a pair
of CUDA events resolved after the run (no sync inside the decode loop), on a CPU with the host clock.
Hook overhead (a few µs per call on the host) is inside the parents' inclusive time; it is the same
before and after a swap, so rankings and before/after comparisons are not skewed by it.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field

import torch

from services.core.pb import events_pb2 as pb
from services.ops import family, family_of, recognise
from services.server import live_parameters
from services.server.functions import FunctionSite, function_params, model_functions, site_of, wrapped
from services.server.introspection import class_path, dtype_name, introspect_module


def first_tensor(values) -> torch.Tensor | None:
    """The first tensor among positional values, or inside a tuple/list/dict-like output."""
    if isinstance(values, torch.Tensor):
        return values
    if isinstance(values, dict):  # ModelOutput is an OrderedDict of its non-None fields
        values = list(values.values())
    if isinstance(values, (tuple, list)):
        for v in values:
            if isinstance(v, torch.Tensor):
                return v
    return None


def _nbytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


@dataclass
class _ClassStats:
    modules: list[torch.nn.Module] = field(default_factory=list)
    calls: int = 0
    host_us: float = 0.0
    events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = field(default_factory=list)
    shapes: Counter = field(default_factory=Counter)
    dtypes: Counter = field(default_factory=Counter)
    shape_module: dict = field(default_factory=dict)  # input shape -> the first instance called with it
    widths: dict = field(default_factory=dict)  # id(instance) -> the last dims of the inputs it was called with
    second_shapes: dict = field(default_factory=dict)  # a function's: input shape -> its second tensor's shape
    third_shapes: dict = field(default_factory=dict)  # and its third's (RoPE's cos)
    input_bytes: int = 0
    output_bytes: int = 0
    child_host_us: Counter = field(default_factory=Counter)  # child attribute name -> host µs inside it
    child_events: list[tuple[str, object, object]] = field(default_factory=list)  # (child name, start, end)
    child_hook_us: float = 0.0  # host time of this profiler's hooks on the children, inside this class's calls


class ModuleProfiler:
    """`with ModuleProfiler(model, cuda) as prof: ...run requests...`, then `prof.results()`."""

    def __init__(self, model: torch.nn.Module, cuda: bool):
        self.model = model
        self.cuda = cuda
        self.stats: dict[str, _ClassStats] = {}
        self._starts: dict[int, list] = {}
        self._handles: list = []
        self._parent: dict[int, tuple[str, str]] = {}  # id(child) -> (its parent's class path, its attribute name)
        self._functions = contextlib.ExitStack()  # the modeling files' functions a family swaps, timed too
        self.functions: dict[str, tuple[FunctionSite, str]] = {}  # target -> (its site, what it computes)

    def __enter__(self) -> ModuleProfiler:
        for parent in self.model.modules():
            for name, child in parent.named_children():
                self._parent.setdefault(id(child), (class_path(parent), name))
        for module in self.model.modules():
            self.stats.setdefault(class_path(module), _ClassStats()).modules.append(module)
            self._handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._post, with_kwargs=True, always_call=True))
        for target, found in model_functions(self.model).items():
            site = site_of(target)
            if site is not None:
                self.functions[target] = (site, found)
                self.stats.setdefault(target, _ClassStats())
                self._functions.enter_context(wrapped(site, self._timed(site)))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._functions.close()

    def _timed(self, site: FunctionSite):
        """A wrapper factory (functions.wrapped): each call of the function timed and counted as a module's is."""

        def around(original):
            def timed(*args, **kwargs):
                self._pre(site, args, kwargs)
                out = None
                try:
                    out = original(*args, **kwargs)
                    return out
                finally:
                    self._post(site, args, kwargs, out)

            return timed

        return around

    def _now(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _pre(self, module, args, kwargs):
        began = time.perf_counter()
        first = first_tensor(args)
        if first is None:
            first = first_tensor(list(kwargs.values()))
        entry = [first, None]
        self._starts.setdefault(id(module), []).append(entry)
        self._charge_parent(module, began)
        entry[1] = self._now()  # last: the hook's own work lies outside this call, inside its parent's

    def _charge_parent(self, module, began: float) -> None:
        parent = self._parent.get(id(module))
        if parent is not None:
            self.stats[parent[0]].child_hook_us += (time.perf_counter() - began) * 1e6

    def _post(self, module, args, kwargs, output):
        end = self._now()  # first: the bookkeeping below is not the module's time
        began = time.perf_counter()
        stack = self._starts.get(id(module))
        if not stack:
            return
        first, start = stack.pop()
        s = self.stats[module.target if isinstance(module, FunctionSite) else class_path(module)]
        s.calls += 1
        if self.cuda:
            s.events.append((start, end))
        else:
            s.host_us += (end - start) * 1e6
        if first is not None:
            s.shapes[tuple(first.shape)] += 1
            s.shape_module.setdefault(tuple(first.shape), module)
            s.dtypes[first.dtype] += 1
            if first.dim():
                s.widths.setdefault(id(module), set()).add(int(first.shape[-1]))
        if isinstance(module, FunctionSite):  # a function's operands and results: every tensor (q, k, cos, sin)
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if first is not None and len(tensors) > 1:
                s.second_shapes.setdefault(tuple(first.shape), tuple(tensors[1].shape))
            if first is not None and len(tensors) > 2:
                s.third_shapes.setdefault(tuple(first.shape), tuple(tensors[2].shape))
            s.input_bytes += sum(_nbytes(a) for a in args if isinstance(a, torch.Tensor))
            outputs = (output,) if isinstance(output, torch.Tensor) else output or ()  # one tensor's, or q's and k's
            s.output_bytes += sum(_nbytes(o) for o in outputs if isinstance(o, torch.Tensor))
        else:
            s.input_bytes += _nbytes(first)
            s.output_bytes += _nbytes(first_tensor(output))
        parent = self._parent.get(id(module))
        if parent is not None:  # the parent's time inside this child, by the child's attribute name
            owner = self.stats[parent[0]]
            if self.cuda:
                owner.child_events.append((parent[1], start, end))
            else:
                owner.child_host_us[parent[1]] += (end - start) * 1e6
        self._charge_parent(module, began)

    def results(self) -> list[pb.ModuleClassProfile]:
        """One profile per module class, in the order classes first appear in the model, then the functions."""
        if self.cuda:
            torch.cuda.synchronize()
        out = [self._function_profile(name, s) if name in self.functions else self._profile(s)
               for name, s in self.stats.items()]  # fmt: skip
        left, rng = live_parameters.PROFILE_BUDGET_BYTES, random.Random(secrets.randbits(64))
        for profile, (name, s) in zip(out, self.stats.items(), strict=True):
            name_of = family_of(profile.computes)
            live_state = getattr(family(name_of), "live_state", None) if name_of else None
            owners = [self.model] if name in self.functions else s.modules  # a function's values live on the model
            budget = min(live_parameters.CLASS_BUDGET_BYTES, left)
            left -= live_parameters.record(profile, owners, live_state, budget, rng)
        return out

    def _function_profile(self, target: str, s: _ClassStats) -> pb.ModuleClassProfile:
        """A function's profile in a module class's shape: its parameters as the forward's, what it computes."""
        site, found = self.functions[target]
        total_us = s.host_us + sum(a.elapsed_time(b) * 1e3 for a, b in s.events)
        dominant = s.shapes.most_common(1)[0][0] if s.shapes else ()
        second, third = s.second_shapes.get(dominant, ()), s.third_shapes.get(dominant, ())
        if found.roles:  # one tensor: no k, and cos its second operand ((x, cos, sin)) or its third ((x, sin, cos))
            second, third = (), second if list(found.roles.values()).index("cos") == 1 else third
        return pb.ModuleClassProfile(
            computes=found.variant,
            roles=found.roles,
            probed=True,
            introspection=pb.ModuleIntrospection(
                class_path=target, forward_params=function_params(site.current), leaf=True
            ),
            instances=1,
            calls=s.calls,
            total_time_us=total_us,
            input_shape=list(dominant),
            widths=_widths(s),
            second_shape=list(second),
            third_shape=list(third),
            dtype=_served_dtype(s),
            input_bytes=round(s.input_bytes / s.calls) if s.calls else 0,
            output_bytes=round(s.output_bytes / s.calls) if s.calls else 0,
        )

    def _profile(self, s: _ClassStats) -> pb.ModuleClassProfile:
        total_us = s.host_us + sum(a.elapsed_time(b) * 1e3 for a, b in s.events)
        dominant = s.shapes.most_common(1)[0][0] if s.shapes else None
        shape = list(dominant) if dominant else []
        params = [sum(_nbytes(p) for p in m.parameters()) for m in s.modules]
        # The instance introspected is one that made the dominant calls: instances of one class can differ
        # (Qwen3's norm class is per-head q/k norms of width 128 and hidden-size norms of width 1536), and the
        # width, parameters and shape must describe the same calls.
        representative = s.shape_module.get(dominant, s.modules[0]) if dominant else s.modules[0]
        found = recognise(representative)  # a leaf's op, or a layer's (a gated MLP) found by running it
        if found and family(found[0]).KIND == "module_class" and not _rows_fit_weights(s):
            found = None  # probed at its weight's width, called at another (FalconMamba's weightless norm): not it
        child_us = Counter(s.child_host_us)
        for name, a, b in s.child_events:
            child_us[name] += a.elapsed_time(b) * 1e3
        return pb.ModuleClassProfile(
            computes=found[1] if found else "",
            roles=family_roles(representative, found),
            child_time_us=dict(child_us),
            child_hook_us=s.child_hook_us,
            probed=True,
            introspection=introspect_module(representative),
            instances=len(s.modules),
            calls=s.calls,
            total_time_us=total_us,
            input_shape=shape,
            widths=_widths(s),
            dtype=_served_dtype(s),
            # Instances of one class can differ (every nn.Linear is one class): the mean is what a
            # call moves on average, so calls × bytes stays the total the roofline needs.
            param_bytes=round(sum(params) / len(params)) if params else 0,
            input_bytes=round(s.input_bytes / s.calls) if s.calls else 0,
            output_bytes=round(s.output_bytes / s.calls) if s.calls else 0,
        )


def family_roles(module: torch.nn.Module, found: tuple[str, str] | None) -> dict[str, str]:
    """The parts its op family found `module`'s children to play ({} for a leaf op, or nothing found)."""
    roles = getattr(family(found[0]), "roles_of", None) if found else None
    return dict(roles(module) or {}) if roles else {}


def _rows_fit_weights(s: _ClassStats) -> bool:
    """Whether every instance of a norm class was called on rows of its own weight's width: one recognised by a
    probe at that width computes the op on its live calls only if they are that wide (FalconMamba builds its
    weightless norm of dt at the intermediate width and calls it on the time-step rank's)."""
    for module in s.modules:
        weight = getattr(module, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.dim() != 1:
            continue  # no weight to scale by (Gemma 4's v norm): never patched (services.server.hotswap)
        if any(w != weight.shape[0] for w in s.widths.get(id(module), ())):
            return False
    return True


def _widths(s: _ClassStats) -> list[int]:
    """Every last dim the class's calls had, ascending (the judge draws each)."""
    return sorted(set().union(*s.widths.values())) if s.widths else []


def _served_dtype(s: _ClassStats) -> str:
    """The floating dtype the class computes in: its inputs', else its parameters' (an embedding takes ids)."""
    floating = [d for d, _ in s.dtypes.most_common() if d.is_floating_point]
    if floating:
        return dtype_name(floating[0])
    for m in s.modules:
        for p in m.parameters():
            return dtype_name(p.dtype)
    return dtype_name(s.dtypes.most_common(1)[0][0]) if s.dtypes else ""
