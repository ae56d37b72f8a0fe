"""A whole decode step replayed from one captured graph (``EngineConfig.decode_graphs``; DESIGN §3): the
embedding, every layer (projections, rotary, the KV write, paged attention over the pools, the MoE layer
steps with their CPU routes joined in the stream) and the LM head, launched by one graph replay instead of
hundreds of kernel launches from Python.

Batch buckets (1, 2, 4, 8, 16, 32 sequences, as far as a step's routes fit the queued MoE step): a step of
B sequences runs in the smallest bucket >= B. Its static inputs -- token ids, positions, KV slots, context
lengths [Bb] and page tables [Bb, pages of max_model_len] -- are written each step from the host through
one staging buffer (page-locked on a GPU); rows past B repeat row 0 (the same token at the same position:
the same K/V written to the same slot, its routes the same experts, so the CPU's expert reads do not grow;
their logits are dropped). Nothing in the step reads a Python value of the batch: the attention reads the
lengths and tables on the device (``layers/attention.device_decode``), a Gated DeltaNet layer its live
states' slots (``layers/linear_attn``: the batch's ``captured`` path), a window kept as state (GPT-OSS)
its ring by those slots and the positions (``layers/attn_window.window_decode``). A step that takes a state
checkpoint runs eagerly (the runner's choice).

A bucket's first two steps run eagerly on its static inputs (kernels compiled, each MoE step shape's own
graphs and joined branch made), the third is captured and replayed, and every later one replayed. The
cache clock advances on the device inside the graph (``ExpertCache.tick(inline=True)``); the host's copy
is advanced by each replay's ticks (counted while capturing on a GPU; the stand-in, whose capture runs
nothing, counts them as each replay runs the step again). A replay first checks the joined branches for
an error of an earlier step. Graphs are dropped when what they captured was reallocated (the KV pools, the expert cache's
tables and slots: ``fingerprint``). Where a model or configuration cannot be captured (``unsupported``),
or a capture fails, decode steps stay eager, with a warning saying why.
Legend: B = sequences, Bb = its bucket, P = pages a sequence may hold, V = vocabulary.
"""

from __future__ import annotations

import logging

import torch

from ft_core.cache.kv_cache import PagedKVCache
from ft_core.cache.state_store import StateBatch, StatePool
from ft_core.config import EngineConfig
from ft_core.device import Device, for_name
from ft_core.experts.cache import TRITON_MAX_ROUTES
from ft_core.experts.cached import CachedBackend, NotCapturable
from ft_core.layers.attn_gated import GatedAttention
from ft_core.layers.attn_gqa import GQAttention
from ft_core.layers.attn_mla import MLAttention
from ft_core.layers.batch import ForwardBatch
from ft_core.layers.linear_attn import GatedDeltaNet

BUCKETS = (1, 2, 4, 8, 16, 32)
EAGER_STEPS = 2  # a bucket's steps run eagerly before its capture

log = logging.getLogger("ft_core.engine")


def unsupported(model, config: EngineConfig) -> str | None:
    """Why ``model``'s decode steps cannot be captured under ``config`` (None: they can)."""
    if config.record_routing:
        return "record_routing reads each step's routes back"
    for i, (_, attn, _, _) in enumerate(model.layers):
        if isinstance(attn, GatedDeltaNet):  # its captured path reads the live slots on the device
            continue
        if not isinstance(attn, (GQAttention, GatedAttention, MLAttention)):
            return f"layer {i}'s attention ({type(attn).__name__}) reads host values of the batch"
        ring = getattr(attn, "state_index", None) is not None  # its window kept as state
        if ring and model.dtype not in (torch.float32, torch.bfloat16):
            return f"layer {i}'s window ring in {model.dtype}: its decode gathers by host values"
        if isinstance(attn, MLAttention) and not isinstance(attn.wkvb, torch.Tensor):
            return f"layer {i}'s kv_b_proj is in a kernel format: its decode expands the context"
    b = model.backend
    if b is not None and not isinstance(b, CachedBackend):
        return "the routed experts run on the host (moe_backend cpu): each step copies x back"
    if isinstance(b, CachedBackend) and b.join == "host":
        return "cpu_join host: the host reads each MoE step's outcome (use callback or flag)"
    return None


class _Bucket:
    """One bucket's static inputs, its batch over them, and its graph once captured."""

    def __init__(
        self, size: int, pages: int, page_size: int, device: torch.device, live: StatePool | None
    ):
        pin = device.type == "cuda"
        self.size = size
        # ids, positions, KV slots, context lengths, live state slots
        self.cols = torch.zeros(5, size, dtype=torch.int64, pin_memory=pin)
        self.table = torch.zeros(size, pages, dtype=torch.int64, pin_memory=pin)
        self.cols_np, self.table_np = self.cols.numpy(), self.table.numpy()
        self.d_cols = torch.zeros(5, size, dtype=torch.int64, device=device)
        self.d_table = torch.zeros(size, pages, dtype=torch.int64, device=device)
        c = self.d_cols
        state = None if live is None else StateBatch(live, [], [])  # its slots: read on the device
        self.batch = ForwardBatch(
            c[0], c[1], c[2], self.d_table, [1] * size, [1] * size, page_size, state
        )
        # read on the device: ctx_tensor(), state_slots_tensor(); "captured": the layers' captured path
        self.batch.memo.update(ctx=c[3], state_slots=c[4], captured=True)
        self.steps = 0  # steps this bucket ran (eager ones included)
        self.graph = None
        self.ticks = 0  # cache clock ticks a replay queues

    def load(self, ids, positions, slots, tables, states) -> None:
        """The step's inputs into the static ones: real rows, then row 0 repeated (queued copies)."""
        B, c, t = len(ids), self.cols_np, self.table_np
        c[0, :B], c[1, :B], c[2, :B] = ids, positions, slots
        c[3, :B] = [p + 1 for p in positions]
        c[4, :B] = states or 0
        c[:, B:] = c[:, :1]
        width = max(len(r) for r in tables)
        for b, r in enumerate(tables):
            t[b, : len(r)] = r
        t[B:, :width] = t[0, :width]
        self.d_cols.copy_(self.cols, non_blocking=True)
        self.d_table[:, :width].copy_(self.table[:, :width], non_blocking=True)


class DecodeGraphs:
    """The decode-step graphs of one engine (module docstring). ``logits`` is the runner's entry."""

    def __init__(
        self,
        config: EngineConfig,
        model,
        kv: PagedKVCache,
        max_model_len: int,
        live: StatePool | None = None,
    ):
        """``live``: the live recurrent states of a hybrid model's sequences (the engine's pool)."""
        self.model, self.kv, self.live = model, kv, live
        b = model.backend
        self.backend = b if isinstance(b, CachedBackend) else None
        self.dev: Device = self.backend.dev if self.backend is not None else for_name(config.device)
        k = model.cfg.moe.top_k if model.bank is not None else 1
        self.buckets = [n for n in BUCKETS if n * k <= TRITON_MAX_ROUTES]
        self.pages = kv.pages_for(max_model_len)
        self._buckets: dict[int, _Bucket] = {}
        self._fp = None
        self.replays = 0  # steps replayed from a graph
        self.enabled = True

    def fingerprint(self) -> tuple:
        """What the graphs captured and a reallocation would move: the KV pools, the expert cache's
        step graphs (cleared on its resize)."""
        fp = tuple(t.data_ptr() for t in self.kv.k if t is not None)
        if self.live is not None:
            fp += tuple(t.data_ptr() for layer in self.live.tensors for t in layer)
        if self.backend is not None:
            fp += (self.backend.graphs.epoch, self.backend.cache.slot_of_id.data_ptr())
        return fp

    def logits(
        self, ids: list[int], positions: list[int], slots: list[int], tables, states=None
    ) -> torch.Tensor | None:
        """Logits [B, V] float32 on the host of a decode step (one new token a sequence: ids, positions,
        KV slots [B], tables: each sequence's page list; ``states``: each one's live state slot, in a
        hybrid model, taking no snapshot this step), or None where no bucket takes it (the caller runs
        it eagerly)."""
        B = len(ids)
        size = next((n for n in self.buckets if n >= B), None)
        if not self.enabled or size is None:
            return None
        fp = self.fingerprint()
        if fp != self._fp:
            self._buckets.clear()  # their graphs read what moved
            self._fp = fp
        bk = self._buckets.get(size)
        if bk is None:
            bk = self._buckets[size] = _Bucket(
                size, self.pages, self.kv.page_size, self.model.device, self.live
            )
        bk.load(ids, positions, slots, tables, states)
        bk.steps += 1
        if bk.graph is None and bk.steps > EAGER_STEPS:
            self._capture(bk)
            if not self.enabled:  # the capture failed: this step eagerly, as every later one
                return None
        if bk.graph is None:
            out = self._forward(bk)
        else:
            out = self._replay(bk)
        return out[:B].to("cpu", copy=True)  # the graph's output is overwritten by its next replay

    def _forward(self, bk: _Bucket) -> torch.Tensor:
        return self.model.logits(self.model.forward(bk.batch, self.kv))

    def _inline(self, fn):
        """``fn()`` with the expert backend's MoE steps launched inline (``CachedBackend.inline``): (its
        result, the cache clock ticks those steps queued on the device while it ran)."""
        b = self.backend
        if b is None:
            return fn(), 0
        ticks0 = b.cache.inline_ticks
        b.inline = True
        try:
            out = fn()
        finally:
            b.inline = False
        return out, b.cache.inline_ticks - ticks0

    def _capture(self, bk: _Bucket) -> None:
        b = self.backend
        try:
            if b is not None and self.model.bank is not None:
                k = self.model.cfg.moe.top_k
                why = b.uncapturable(bk.size * k, bk.size, self.model.dtype)
                if why is not None:
                    raise NotCapturable(why)
            self.dev.synchronize()
            if b is not None:
                b.quiesce()
            # (a GPU's capture runs the step's Python once: the ticks each replay queues)
            bk.graph, bk.ticks = self._inline(
                lambda: self.dev.capture(lambda: self._forward(bk), shared=True)
            )
        except Exception as e:  # noqa: BLE001 -- the eager step is the same computation
            bk.graph = None
            self.enabled = False
            log.warning(
                "capturing the decode step in a graph failed (%s: %s); decode steps run eagerly",
                type(e).__name__,
                e,
            )

    def _replay(self, bk: _Bucket) -> torch.Tensor:
        b = self.backend
        if b is not None:
            for br in b.joined_branches():
                br.check()  # an error of an earlier step's branch
            b.quiesce()
        # (the stand-in's replay runs the step's Python again, and counts its ticks again)
        out, ticks = self._inline(bk.graph.replay)
        if b is not None:  # a GPU's replay ticks what its capture counted
            b.cache.clock += bk.ticks + ticks
        self.replays += 1
        return out
