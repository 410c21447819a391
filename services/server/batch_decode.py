"""Decode steps over a slot cache: many sequences in one forward, each step one CUDA graph (eager on a CPU).

Eager decode of an HF model is launch-bound at small batches: hundreds of small kernels per step, each
paying the host's launch cost. Over a slot cache (services.server.slot_cache) every tensor a step touches
has a fixed address, so the step over the first n slots is captured once as a CUDA graph per bucket size n
and replayed: the host pays one launch per step, whatever n is. A step feeds each busy slot its token at
its own position; slots join (prefill, eager) and leave between steps, which is what continuous batching
needs.

No capture on the request path. Every (rows, span) graph a step can need is captured at load (`capture_all`),
before the server takes traffic. A graph holds whatever forward each module had when captured, so each records
the swaps serving then (`hotswap.serving_kernels`):
- after a commit the old graphs keep serving (the kernels they hold are all still served; the new one is not in
  them yet) while `capture_stale` captures fresh ones when the engine is idle (services.server.engine), and under
  traffic that never pauses the batch loop captures the next step's between its holds (`refresh`, at most once in
  engine.CAPTURE_UNDER_LOAD_S); a capture while requests run writes their next positions in its warm-up (which
  their next step overwrites before reading) and would advance a state: a stateful model's busy rows get theirs back;
- after a revert a graph holding the kernel taken out is never replayed again. Each key keeps its stock graph
  (captured with no swap serving: the model's own forwards) beside its latest, so a revert falls back to the stock
  graph at once, never to eager steps (measured on the H200 before this: a run that rolled its four swaps back left
  every step eager, 0.16x the served throughput, until the engine was idle long enough to capture all 55 graphs
  again); a revert of every swap leaves nothing to capture. Memory: at most two graphs a key;
- a swap's parity canary (`fresh()`) captures fresh graphs as it steps: the kernel is checked inside a graph.

Every layer kind the slot plan knows steps here (services.server.slot_plan): full attention, sliding windows and
chunks (rings), conv and recurrent states. A model whose layers see differently gets one mask per kind (a dict,
looked up by the model); a stateful model's prompts are prefilled in groups of equal length, eagerly (padding
would run through its recurrence), and its unfed busy rows keep their state across a step (`hold`).

Over 400 lines, one file: the slot decoder's prefill, step and graph capture share the slot cache's fixed addresses,
which a graph holds; the cache kinds and masks live apart (slot_cache, slot_plan, slot_masks, slot_state).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from services.server.hotswap import first_forward, graph_lane, serving_kernels
from services.server.models import error_line
from services.server.slot_cache import SlotIndex, slot_cache
from services.server.slot_masks import prefill_mask, step_mask
from services.server.slot_plan import SlotPlan, Visibility, slot_plan

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # step sizes captured as graphs; a step runs the smallest that fits
# Positions a step attends over, doubling from this up to the slot: attention reads every position it is
# given, so 16 streams 200 tokens deep should not read 2048 (measured on the H200, 1.5B shape, 16 streams:
# 10.9 ms a step over whole 2048-token slots). One graph per (rows, length) pair met.
SHORTEST_SPAN = 128
WARMUP_STEPS = 2  # eager steps on a side stream before a capture (lazy inits, cuBLAS handles, allocator)
# Joins through graphs too: an eager prefill of the 1.5B shape is host-bound (~25-30 ms for one short prompt on
# the H200, 5 decode steps of 16 streams), and in a steady stream of requests every join stalls every stream.
# Up to PREFILL_GRAPH_ROWS prompts joining together, right-padded to a length in PREFILL_GRAPH_LENGTHS, replay a
# graph; a larger burst replays up to PREFILL_GROUPS such graphs, and a burst larger still runs eagerly. On the H200
# (bench/results/prefill_joins_h200.json) a graph of 4 prompts of 64 tokens took 5.6 ms and one eager join of 8-64
# prompts 31-45 ms however many (the host's launches bound it): 2 graphs beat it 3x, 4 graphs 1.6x, 8 lost.
PREFILL_GRAPH_ROWS = 4
PREFILL_GROUPS = 4
PREFILL_GRAPH_LENGTHS = (16, 32, 64, 128, 256)
PREFILL = "prefill"  # a prefill graph's key: (PREFILL, prompts, padded length); a step's: (rows, span)


@dataclass
class Graph:
    graph: torch.cuda.CUDAGraph
    logits: torch.Tensor  # the graph's output buffer
    kernels: frozenset[int]  # the swaps serving when it was captured (hotswap.serving_kernels)


def runnable(kept: list[Graph | None], serving: frozenset[int]) -> Graph | None:
    """Of a key's kept graphs (its latest, its stock), the one to replay with `serving` patched in: of those holding
    no kernel taken out since (a graph runs what it captured), the one holding the most; None when none may run."""
    fit = [g for g in kept if g is not None and g.kernels <= serving]
    return max(fit, key=lambda g: len(g.kernels), default=None)


class SlotDecoder:
    def __init__(
        self,
        model: torch.nn.Module,
        device: str,
        dtype: torch.dtype,
        slots: int,
        max_len: int,
        cache_kw: str,
        graphs: bool = True,  # on a GPU, each step a CUDA graph; False (or a CPU): eager steps
        prefill_groups: int = PREFILL_GROUPS,  # a join past one prefill graph: up to this many graph replays
    ):
        self.model = model
        self.device = torch.device(device)
        self.graphs = graphs and self.device.type == "cuda"
        self.slots, self.max_len, self.cache_kw = slots, max_len, cache_kw
        self.index = SlotIndex(slots, self.device)
        plan = slot_plan(getattr(model, "config", None), max_len)
        if isinstance(plan, str):
            raise ValueError(f"no slot cache for this model: {plan}")
        self.plan: SlotPlan = plan
        self.cache = slot_cache(plan, slots, max_len, self.index)
        self.ids = torch.zeros((slots, 1), dtype=torch.long, device=self.device)
        self.span = torch.arange(max_len, device=self.device)
        self.masked = torch.finfo(dtype).min
        self.dtype = dtype
        self.lengths = [0] * slots  # tokens in each slot's cache: the position its next token is fed at
        self.busy = [False] * slots
        self._graphs: dict[tuple, Graph] = {}  # key -> its latest graph
        self._stock: dict[tuple, Graph] = {}  # key -> its graph of no swap, kept: what a revert falls back to
        self._used: dict[tuple, int] = {}  # key -> the step that last ran it: fresh captures go there first
        # A prefill graph's inputs: static buffers it reads, written before each replay (views keep their address)
        longest = max(PREFILL_GRAPH_LENGTHS)
        self._prefill_ids = torch.zeros((PREFILL_GRAPH_ROWS, longest), dtype=torch.long, device=self.device)
        self._prefill_slots = torch.zeros(PREFILL_GRAPH_ROWS, dtype=torch.long, device=self.device)
        self._prefill_lasts = torch.zeros(PREFILL_GRAPH_ROWS, dtype=torch.long, device=self.device)
        self._causal = torch.full((longest, longest), self.masked, dtype=dtype, device=self.device).triu(1)
        self._steps = 0
        self.prefill_groups = prefill_groups
        self._fresh = False  # set by `fresh()`: a step captures a graph of the kernels serving now, now
        self.captures = 0
        self.eager_steps = 0  # steps run eagerly on a GPU: no graph of theirs could run (after a revert, say)

    # ------------------------------------------------------------------ slots

    def free_slot(self) -> int | None:
        return next((s for s in range(self.slots) if not self.busy[s]), None)

    def free_slots(self) -> list[int]:
        return [s for s in range(self.slots) if not self.busy[s]]

    def fits(self, tokens: int) -> bool:
        return tokens <= self.max_len

    def release(self, slot: int) -> None:
        self.busy[slot], self.lengths[slot] = False, 0

    def _bucket_for(self, highest: int) -> int:
        return min(next((b for b in BUCKETS if b > highest), self.slots), self.slots)

    def bucket(self) -> int:
        """Rows the next step runs: the smallest bucket holding every busy slot."""
        return self._bucket_for(max((s for s in range(self.slots) if self.busy[s]), default=0))

    def compact(self) -> dict[int, int]:
        """Move the highest busy slots into the lowest free ones while that shrinks the step: {old: new}."""
        moves: dict[int, int] = {}
        while True:
            busy = [s for s in range(self.slots) if self.busy[s]]
            free = self.free_slot()
            if not busy or free is None or free > busy[-1]:
                return moves
            top = busy[-1]
            if self._bucket_for(max([free] + busy[:-1])) >= self._bucket_for(top):
                return moves  # no smaller step: a copy would buy nothing
            with torch.inference_mode():
                for layer in self.cache.layers:
                    if hasattr(layer, "move"):  # a layer without attention or state holds nothing
                        layer.move(top, free)
            self.busy[free], self.lengths[free] = True, self.lengths[top]
            self.release(top)
            origin = next((k for k, v in moves.items() if v == top), top)
            moves[origin] = free

    # ------------------------------------------------------------------ forwards

    def _call(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, keep=1) -> torch.Tensor:
        out = self.model(
            input_ids=ids,
            position_ids=positions,
            attention_mask=mask,
            use_cache=True,
            logits_to_keep=keep,
            **{self.cache_kw: self.cache},
        )
        return out.logits

    def prefill(self, slot: int, ids: list[int]) -> torch.Tensor:
        """Write a prompt into a free slot; the logits after its last token."""
        return self.prefill_many([slot], [ids])[0]

    def prefill_many(self, slots: list[int], prompts: list[list[int]]) -> list[torch.Tensor]:
        """Write prompts into free slots in one forward (right-padded); the logits after each one's last token."""
        for slot, ids in zip(slots, prompts, strict=True):
            if self.busy[slot]:
                raise ValueError(f"slot {slot} is busy")
            if len(ids) >= self.max_len:
                raise ValueError(f"{len(ids)} prompt tokens do not fit the {self.max_len}-token slot cache")
        lengths = [len(ids) for ids in prompts]
        path = self.prefill_path(prompts)
        with torch.inference_mode():
            if path == "by length":
                rows = self._prefill_equal_lengths(slots, prompts)
            elif path == "graph":
                rows = self._prefill_graph(self._prefill_key(len(prompts), max(lengths)), slots, prompts)
            elif path == "graph groups":
                rows = self._prefill_groups(slots, prompts)
            else:
                rows = self._prefill_eager(slots, prompts)
        for slot, n in zip(slots, lengths, strict=True):
            self.busy[slot], self.lengths[slot] = True, n
        return rows

    def prefill_path(self, prompts: list[list[int]]) -> str:
        """How a join of `prompts` is prefilled: "by length" (a stateful model's, never padded), "graph" (one prefill
        graph), "graph groups" (a join too large for one graph, in up to `prefill_groups` of them, every prompt
        within the graphs' lengths) or "eager" (one forward)."""
        longest = max(len(ids) for ids in prompts)
        if self.plan.stateful:
            return "by length"
        if self.graphs and self._prefill_key(len(prompts), longest) is not None:
            return "graph"
        groups = -(-len(prompts) // PREFILL_GRAPH_ROWS)
        if self.graphs and 1 < groups <= self.prefill_groups and self._prefill_key(1, longest) is not None:
            return "graph groups"
        return "eager"

    def _prefill_groups(self, slots: list[int], prompts: list[list[int]]) -> list[torch.Tensor]:
        rows: list[torch.Tensor] = []
        for i in range(0, len(prompts), PREFILL_GRAPH_ROWS):
            group, where = prompts[i : i + PREFILL_GRAPH_ROWS], slots[i : i + PREFILL_GRAPH_ROWS]
            rows += self._prefill_graph(self._prefill_key(len(group), max(len(ids) for ids in group)), where, group)
        return rows

    def _prefill_equal_lengths(self, slots: list[int], prompts: list[list[int]]) -> list[torch.Tensor]:
        """One forward per prompt length: no padding runs through a recurrent state."""
        rows: list[torch.Tensor | None] = [None] * len(prompts)
        for length in sorted({len(ids) for ids in prompts}):
            group = [i for i, ids in enumerate(prompts) if len(ids) == length]
            prefilled = self._prefill_eager([slots[i] for i in group], [prompts[i] for i in group])
            for i, row in zip(group, prefilled, strict=True):
                rows[i] = row
        return rows  # type: ignore[return-value]

    def _prefill_eager(self, slots: list[int], prompts: list[list[int]]) -> list[torch.Tensor]:
        lengths = [len(ids) for ids in prompts]
        longest = max(lengths)
        lasts = sorted({n - 1 for n in lengths})  # the positions whose logits are wanted, for every row
        padded = [ids + [0] * (longest - len(ids)) for ids in prompts]
        tensor = torch.tensor(padded, dtype=torch.long, device=self.device)
        positions = self.span[:longest][None].expand(len(prompts), -1)
        self.index.prefill = torch.tensor(slots, device=self.device)
        self.index.prefill_lasts = torch.tensor([n - 1 for n in lengths], device=self.device)
        try:
            keep = 1 if len(lasts) == 1 else torch.tensor(lasts, device=self.device)
            with first_forward():  # fresh slots: each prompt attends to itself only
                logits = self._call(tensor, positions, self._prefill_masks(longest, len(prompts)), keep)
        finally:
            self.index.prefill = self.index.prefill_lasts = None
        return [logits[i, lasts.index(n - 1) if len(lasts) > 1 else -1] for i, n in enumerate(lengths)]

    def _causal_mask(self, length: int, rows: int) -> torch.Tensor:
        if length <= self._causal.shape[0]:
            causal = self._causal[:length, :length]
        else:
            causal = torch.full((length, length), self.masked, dtype=self.dtype, device=self.device).triu(1)
        return causal.expand(rows, 1, -1, -1)

    def _prefill_masks(self, length: int, rows: int) -> torch.Tensor | dict:
        """The prompts' masks: one causal mask, or one per attention kind (a window binds: its layers see less)."""
        if not self.plan.mask_dict:
            rule = next(iter(self.plan.mask_rules.values()), Visibility())
            if rule.ring(self.max_len) == self.max_len:
                return self._causal_mask(length, rows)
            return prefill_mask(rule, length, rows, self.device, self.dtype, self.masked)
        return self._by_kind(
            {kind: prefill_mask(rule, length, rows, self.device, self.dtype, self.masked)
             for kind, rule in self.plan.mask_rules.items()}
        )  # fmt: skip

    def _step_masks(self, positions: torch.Tensor, span: int) -> torch.Tensor | dict:
        """A step's masks: row b sees its own slot up to positions[b], within its layer kind's window or chunk."""
        masks = {}
        for kind, rule in self.plan.mask_rules.items():
            ring = rule.ring(self.max_len)
            masks[kind] = step_mask(rule, positions, min(span, ring), ring, self.dtype, self.masked)
        return self._by_kind(masks) if self.plan.mask_dict else next(iter(masks.values()))

    @staticmethod
    def _by_kind(masks: dict) -> dict:
        """The masks as a model looks them up: by attention kind, and None (no padding) for its state layers."""
        return {**masks, "linear_attention": None, "conv": None}

    def _prefill_key(self, prompts: int, longest: int) -> tuple | None:
        """The graph a join of `prompts` prompts, the longest `longest` tokens, replays; None: it runs eagerly."""
        if prompts > min(PREFILL_GRAPH_ROWS, self.slots) or self.plan.stateful:
            return None  # a stateful model's prompts are never padded (`_prefill_equal_lengths`)
        length = next((n for n in PREFILL_GRAPH_LENGTHS if n >= longest and n < self.max_len), None)
        return None if length is None else (PREFILL, prompts, length)

    def _prefill_forward(self, k: int, length: int) -> torch.Tensor:
        """The prefill a graph holds: the static buffers' first k prompts, `length` positions; [k, k, vocab]."""
        self.index.prefill, self.index.prefill_lasts = self._prefill_slots[:k], self._prefill_lasts[:k]
        try:
            with first_forward():
                ids, positions = self._prefill_ids[:k, :length], self.span[:length][None].expand(k, -1)
                return self._call(ids, positions, self._prefill_masks(length, k), self._prefill_lasts[:k])
        finally:
            self.index.prefill = self.index.prefill_lasts = None

    def _prefill_graph(self, key: tuple, slots: list[int], prompts: list[list[int]]) -> list[torch.Tensor]:
        _, k, length = key
        self._prefill_ids[:k, :length].zero_()
        for i, ids in enumerate(prompts):
            self._prefill_ids[i, : len(ids)].copy_(torch.tensor(ids, dtype=torch.long))
        self._prefill_slots[:k].copy_(torch.tensor(slots, dtype=torch.long))
        self._prefill_lasts[:k].copy_(torch.tensor([len(ids) - 1 for ids in prompts], dtype=torch.long))
        graph = self._ready(key)
        if graph is None:  # none may run now (after a revert): eagerly, never a capture on the request path
            self.eager_steps += 1
            logits = self._prefill_forward(k, length)
        else:
            graph.graph.replay()
            logits = graph.logits
        return [logits[i, i].clone() for i in range(k)]  # the graph's buffer: the next join's replay rewrites it

    def span_for(self, need: int) -> int:
        """Positions a step attends over when its deepest row needs `need`."""
        span = SHORTEST_SPAN
        while span < need:
            span *= 2
        return min(span, self.max_len)

    def _step(self, n: int, span: int) -> torch.Tensor:
        self.index.length, self.index.n = span, n
        positions = self.index.positions[:n]
        return self._call(self.ids[:n], positions, self._step_masks(positions, span))[:, -1]

    def _capture(self, key: tuple) -> None:
        """Capture the graph of `key` (a step's (rows, span) or a prefill's): eager warm-up runs on a side stream
        first (live calls: a swapped kernel's are checked inline there, on the graph's very shape)."""
        if key[0] == PREFILL:
            _, k, length = key
            forward = lambda: self._prefill_forward(k, length)  # noqa: E731
        else:
            forward = lambda: self._step(*key)  # noqa: E731
        # The warm-up steps advance a state: a stateful model's busy rows get theirs back after it (a capture while
        # requests run: a swap's, or under load), and they write each busy row at its next position (`_ahead`).
        # In graph_lane a swap serves where it wins on GPU time, warm-up included (hotswap.serve).
        busy = [s for s in range(self.slots) if self.busy[s]]
        ahead = self._ahead(*key) if key[0] != PREFILL and busy else contextlib.nullcontext()
        with self._states_kept(busy), ahead, graph_lane():
            stream = torch.cuda.Stream()  # after the states are copied: the warm-up waits for the copies
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(WARMUP_STEPS):
                    forward()
            torch.cuda.current_stream().wait_stream(stream)
            kernels = serving_kernels()
            graph = torch.cuda.CUDAGraph()
            # thread-local: a swap compiling its kernels on a worker thread meanwhile (parity.warm_kernel) is no error
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                logits = forward()
        self._graphs[key] = Graph(graph, logits, kernels)
        if not kernels:
            self._stock[key] = self._graphs[key]
        self.captures += 1

    @contextlib.contextmanager
    def _ahead(self, n: int, span: int) -> Iterator[None]:
        """Inside the block a step writes each busy row at its next position (within `span`), which the row's own
        next step overwrites before reading (a busy slot's throwaway write), not at the position its last step wrote:
        re-run there from the state that step already advanced, a hybrid model's attention would rewrite that key
        with another value (tiny-jamba's tokens parted after a capture under load). The positions are put back."""
        kept = self.index.positions[:n].clone()
        last = kept.view(-1).tolist()
        ahead = [
            self.lengths[s] if self.busy[s] and self.lengths[s] < min(span, self.max_len) else last[s] for s in range(n)
        ]
        self.index.positions[:n].copy_(torch.tensor(ahead, dtype=torch.long).view(n, 1))
        try:
            yield
        finally:
            self.index.positions[:n].copy_(kept)

    @contextlib.contextmanager
    def _states_kept(self, rows: list[int]) -> Iterator[None]:
        """A stateful model's states of `rows` as they were before the block (steps that must not advance them); a
        model without states keeps nothing."""
        states = [layer for layer in self.cache.layers if hasattr(layer, "hold")] if self.plan.stateful and rows else []
        saved = [layer.hold(rows) for layer in states]
        yield
        for layer, kept in zip(states, saved, strict=True):
            layer.restore(rows, kept)

    def _ready(self, key: tuple) -> Graph | None:
        """The graph `key` replays now: its runnable one, or (under `fresh()`) one captured now with the kernels
        serving now; None when none may run (the caller runs the forward eagerly)."""
        self._steps += 1
        self._used[key] = self._steps
        graph = self._runnable(key)
        if self._fresh and (graph is None or graph.kernels != serving_kernels()):
            self._capture(key)
            graph = self._graphs[key]
        return graph

    def keys(self) -> list[tuple]:
        """Every graph a step or a join can replay: (rows, span) for each bucket up to the slots and each span up
        to the slot's length; (PREFILL, prompts, length) for each join small enough for one."""
        rows = sorted({self._bucket_for(highest) for highest in range(self.slots)})
        spans = sorted({self.span_for(need) for need in [1, *(SHORTEST_SPAN << k for k in range(16))]})
        joins = range(1, 0 if self.plan.stateful else min(PREFILL_GRAPH_ROWS, self.slots) + 1)
        prefills = [(PREFILL, k, n) for k in joins for n in PREFILL_GRAPH_LENGTHS if n < self.max_len]
        return [(n, span) for n in rows for span in spans if span <= self.max_len] + prefills

    def _runnable(self, key: tuple) -> Graph | None:
        """The key's graph to replay now: its latest or its stock one, whichever holds more of the kernels serving now
        and none taken out (fresh, from before a commit, or the stock one after a revert)."""
        return runnable([self._graphs.get(key), self._stock.get(key)], serving_kernels())

    def stale_keys(self) -> list[tuple]:
        """Keys with no graph of the kernels serving now, the most recently stepped first."""
        now = serving_kernels()
        stale = [k for k in self.keys() if (g := self._runnable(k)) is None or g.kernels != now]
        return sorted(stale, key=lambda k: -self._used.get(k, -1))

    def _positions_free(self) -> None:
        """With no slot busy, every row of a warm-up step writes at position 0 of a free slot, and a prefill's into
        the first slots (which their next prefill overwrites)."""
        if not any(self.busy):
            self.index.positions.zero_()
            self._prefill_slots.copy_(torch.arange(PREFILL_GRAPH_ROWS, device=self.device) % self.slots)
            self._prefill_lasts.zero_()

    def capture_stale(self, most: int = 1) -> int:
        """Capture up to `most` stale graphs (the engine calls this when idle); returns how many."""
        if not self.graphs:
            return 0
        done = 0
        with torch.inference_mode():
            for key in self.stale_keys()[:most]:
                self._positions_free()
                self._capture(key)
                done += 1
        return done

    def capture_all(self) -> tuple[int, float]:
        """Capture every stale graph now (at load, before traffic); (graphs captured, seconds)."""
        start = time.perf_counter()
        count = self.capture_stale(len(self.keys())) if self.graphs else 0
        if count:
            torch.cuda.synchronize()
        return count, time.perf_counter() - start

    @contextlib.contextmanager
    def fresh(self) -> Iterator[None]:
        """Steps inside capture the graph of the kernels serving now where they have none (a swap's canary)."""
        self._fresh = True
        try:
            yield
        finally:
            self._fresh = False

    def _next_key(self) -> tuple[int, int]:
        """The (rows, span) graph the next step of the busy slots replays."""
        deepest = max((self.lengths[s] for s in range(self.slots) if self.busy[s]), default=0)
        return self.bucket(), self.span_for(deepest + 1)

    def refresh(self) -> int:
        """Capture, now, the graph of the kernels serving now that the running requests step through next, if it
        has none; the others are captured when the engine is idle (`capture_stale`). Returns how many were
        captured. Only one: a swap holds the model while this runs (each capture of the 1.5B shape took ~0.3-0.7
        s on the H200)."""
        if not self.graphs or not any(self.busy):
            return 0
        key = self._next_key()
        graph = self._runnable(key)
        if graph is not None and graph.kernels == serving_kernels():
            return 0
        with torch.inference_mode():
            self._capture(key)
        return 1

    def step(self, feeds: dict[int, int]) -> torch.Tensor:
        """Feed each slot in `feeds` its token at its next position; the logits of the bucket's rows, by slot.

        Busy slots not fed (a measurement while requests wait) get a throwaway write at their next position,
        which their own next step overwrites before reading; free slots attend to position 0 only.
        """
        n = self.bucket()
        ids, positions = [0] * n, [0] * n
        for slot, token in feeds.items():
            if not self.busy[slot] or slot >= n:
                raise ValueError(f"slot {slot} is not in use")
            if self.lengths[slot] >= self.max_len:
                raise ValueError(f"slot {slot} is full ({self.max_len} tokens)")
            ids[slot] = token
        for slot in range(n):
            positions[slot] = self.lengths[slot] if self.busy[slot] else 0
        span = self.span_for(max(positions) + 1)
        # a state advances with every token a step feeds it: a busy slot not fed keeps the one it had
        unfed = [s for s in range(n) if self.busy[s] and s not in feeds]
        with torch.inference_mode(), self._states_kept(unfed):
            self.ids[:n].copy_(torch.tensor(ids, dtype=torch.long).view(n, 1))
            self.index.positions[:n].copy_(torch.tensor(positions, dtype=torch.long).view(n, 1))
            if not self.graphs:
                logits = self._step(n, span)
            else:
                graph = self._ready((n, span))
                if graph is None:  # none of its graphs may run now: eagerly, never a capture on the request path
                    self.eager_steps += 1
                    logits = self._step(n, span)
                else:
                    graph.graph.replay()
                    logits = graph.logits
        for slot in feeds:
            self.lengths[slot] += 1
        return logits


def lane_refusal(decoder: SlotDecoder) -> str | None:
    """Why the model cannot decode over the slot cache, found by trying (a two-token prefill into a free slot and,
    where steps run eagerly, one step; then the slot freed); None when it can. The lane passes its own 4-D causal
    mask and positions: a model that builds its mask otherwise (Bloom's ALiBi wants the 2-D padding mask) raises
    here, at load, and is served on the solo lane instead of failing every request. Not a graph step: a capture
    belongs to the engine's thread and the first request's bucket."""
    slot = decoder.free_slot()
    if slot is None:
        return None
    try:
        decoder.prefill(slot, [0, 0])
        if not decoder.graphs:
            decoder.step({slot: 0})
    except Exception as exc:  # any architecture's own error: the lane is off, the solo lane serves
        return f"the model does not decode over slots ({error_line(exc, 200)})"
    finally:
        decoder.release(slot)
    return None
