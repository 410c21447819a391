"""Batch-1 greedy decode over a static KV cache, one CUDA graph for the decode step (eager on a CPU).

Eager decode of an HF model at batch 1 is launch-bound: hundreds of small kernels per step, each paying
the host's launch cost. A static cache keeps every tensor of a step at a fixed address, so one step can
be captured once as a CUDA graph and replayed: the host pays one launch per token. Prefill runs eager.
The graph holds whatever forward each module had when it was captured: when a swap patches or
restores forwards (`hotswap.forwards_version` changes), the next step captures again, with the kernel
now serving — between steps, under the engine's lock, like every swap.
"""

from __future__ import annotations

import inspect

import torch

from services.server.hotswap import forwards_version

WARMUP_STEPS = 2  # eager steps on a side stream before capture (lazy inits, cuBLAS handles, allocator)


def static_cache(model: torch.nn.Module, max_len: int, device, dtype):
    """A StaticCache for one sequence of `max_len` tokens, across transformers' signatures."""
    from transformers import StaticCache

    params = inspect.signature(StaticCache.__init__).parameters
    kwargs = {"config": model.config, "max_cache_len": max_len}
    for name, value in (("max_batch_size", 1), ("batch_size", 1), ("device", device), ("dtype", dtype)):
        if name in params:
            kwargs[name] = value
    return StaticCache(**kwargs)


class GraphDecoder:
    """Greedy decode of one sequence at a time over a static cache; the step replayed from a CUDA graph."""

    def __init__(self, model: torch.nn.Module, device: str, dtype: torch.dtype, max_len: int, cache_kw: str):
        self.model = model
        self.device = torch.device(device)
        self.graphs = self.device.type == "cuda"
        self.cache = static_cache(model, max_len, self.device, dtype)
        self.max_len = max_len
        self.cache_kw = cache_kw
        self.ids = torch.zeros((1, 1), dtype=torch.long, device=self.device)
        self.position = torch.zeros((1,), dtype=torch.long, device=self.device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None
        self.captures = 0
        self.captured_version = -1
        self.last_logits: torch.Tensor | None = None  # the last step's (or prefill's) logits, for parity checks

    def invalidate(self) -> None:
        """The model's forwards changed (a swap, a rollback): the next step captures a new graph."""
        self.graph, self.logits = None, None

    def _run(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        out = self.model(
            input_ids=ids, cache_position=positions, use_cache=True, logits_to_keep=1, **{self.cache_kw: self.cache}
        )
        return out.logits[:, -1]

    def prefill(self, ids: list[int]) -> int:
        if len(ids) >= self.max_len:
            raise ValueError(f"{len(ids)} prompt tokens do not fit the {self.max_len}-token static cache")
        with torch.inference_mode():  # the cache's tensors were made under it: reset them under it too
            self.cache.reset()
            tensor = torch.tensor([ids], dtype=torch.long, device=self.device)
            logits = self._run(tensor, torch.arange(len(ids), device=self.device))
        self.last_logits = logits[0]
        return int(logits[0].argmax())

    def _capture(self) -> None:
        version = forwards_version()  # before: a kernel that fails while captured reverts, and bumps it again
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # the same token at the same position: the cache writes are idempotent
            for _ in range(WARMUP_STEPS):
                self._run(self.ids, self.position)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.logits = self._run(self.ids, self.position)
        self.graph = graph
        self.captured_version = version
        self.captures += 1

    def step(self, token: int, position: int) -> int:
        """The next greedy token after feeding `token` at `position` (the cache holds everything before it)."""
        if position >= self.max_len:
            raise ValueError(f"position {position} is past the {self.max_len}-token static cache")
        with torch.inference_mode():
            self.ids.fill_(token)
            self.position.fill_(position)
            if not self.graphs:
                self.last_logits = self._run(self.ids, self.position)[0]
                return int(self.last_logits.argmax())
            if self.graph is None or self.captured_version != forwards_version():
                self._capture()
            self.graph.replay()
            self.last_logits = self.logits[0]
            return int(self.last_logits.argmax())

    def decode(self, ids: list[int], max_new: int) -> list[int]:
        token = self.prefill(ids)
        tokens = [token]
        while len(tokens) < max_new:
            token = self.step(token, len(ids) + len(tokens) - 1)
            tokens.append(token)
        return tokens
