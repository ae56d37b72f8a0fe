"""Engine: load a checkpoint, then score or generate. The step is schedule -> run -> postprocess (the
scheduler decides, the ModelRunner of runner.py runs and samples).

    eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
    logits = eng.score(token_ids)                    # [T, V] float32, one forward
    outs = eng.generate(["Hello"], SamplingParams(max_tokens=32, temperature=0.0))
    seq = eng.add_request("Hello", params); eng.step() ...; eng.abort(seq)   # what a server drives
"""

from __future__ import annotations

import itertools
from pathlib import Path

import torch

from ft_core import env
from ft_core.cache.anchors import AnchorTokens, CheckpointPolicy
from ft_core.cache.kv_cache import PagedKVCache
from ft_core.cache.radix import RadixCache
from ft_core.cache.state_cache import StateCheckpoints
from ft_core.cache.state_store import StateLayout, StatePool
from ft_core.config import EngineConfig
from ft_core.constraint import TokenConstraint
from ft_core.errors import FTError, RequestError
from ft_core.experts.cached import CachedBackend
from ft_core.layers.dense import small_forward
from ft_core.loader.checkpoint import load_checkpoint
from ft_core.memory import MemoryManager, MemoryPools
from ft_core.nonfinite import all_finite, split_non_finite
from ft_core.runner import ModelRunner
from ft_core.sampling import SamplingParams
from ft_core.scheduler import ScheduledBatch, Scheduler
from ft_core.scheduler_state import HybridState
from ft_core.sequence import GenerationOutput, Sequence


class Engine:
    def __init__(self, config: EngineConfig):
        self.config = config
        ckpt = load_checkpoint(config)
        self.model_config, self.model, self.tokenizer = (
            ckpt.model_config,
            ckpt.model,
            ckpt.tokenizer,
        )
        self.max_model_len = _context_limit(config.max_model_len, self.model_config.max_position)
        per_page = self.model.kv_bytes_per_token(config.torch_dtype) * config.page_size
        pages = 4 * -(
            -self.max_model_len // config.page_size
        )  # (every layer keeping state: pages of 0 bytes)
        pages = max(1, min(config.kv_cache_bytes // per_page, pages) if per_page else pages)
        self.kv = PagedKVCache(
            self.model.kv_layouts(pages, config.page_size, config.torch_dtype), config.dense_device
        )
        self.max_model_len = min(
            self.max_model_len, pages * config.page_size
        )  # one sequence must fit the pool
        self.prefix = RadixCache(self.kv) if config.prefix_cache else None
        self.state_layout = StateLayout.of(
            self.model_config, config.torch_dtype, config.window_state
        )
        self.live_states = self.checkpoints = hybrid = None
        if (
            self.state_layout is not None
        ):  # recurrent layers / windows: live states, checkpoints, anchors
            self.live_states = StatePool(self.state_layout, config.state_slots, config.dense_device)
            slots = config.checkpoint_slots(self.state_layout.bytes_per_slot)
            if self.prefix is not None and slots > 0 and config.checkpoint_policy != "none":
                pool = StatePool(self.state_layout, slots, config.dense_device)
                self.checkpoints = StateCheckpoints(self.prefix, self.kv, pool)
            else:
                self.prefix = None  # without checkpoints a hybrid model can resume nowhere
            policy = CheckpointPolicy(
                config.checkpoint_policy,
                AnchorTokens.from_tokenizer(self.tokenizer),
                config.checkpoint_interval,
                config.checkpoints_per_prompt,
            )
            hybrid = HybridState(self.kv, self.live_states, self.checkpoints, policy)
        self.scheduler = Scheduler(self.kv, config.max_batch_tokens, self.prefix, hybrid)
        self.eos_ids = set(self.tokenizer.eos_token_ids) | set(self.model_config.eos_token_ids)
        self._ids = itertools.count()
        self.runner = ModelRunner(
            config,
            self.model,
            self.kv,
            self.tokenizer,
            self.eos_ids,
            self.max_model_len,
            self.state_layout,
            self.live_states,
            self.checkpoints,
        )
        b, bank = (
            self.model.backend,
            self.model.bank,
        )  # the MemoryManager's pools: KV, experts, states
        self.memory = MemoryManager(
            MemoryPools(
                self.kv,
                self.prefix,
                b if isinstance(b, CachedBackend) else None,
                self.checkpoints,
                per_page // config.page_size,
                bank.nbytes_per_id() if bank is not None else 0,
                self.max_model_len,
            )
        )

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path | None = None,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        **options,
    ) -> "Engine":
        """Load a checkpoint directory (None: the built-in demo model). ``options``: EngineConfig fields."""
        if path is None:
            from ft_core.demo import demo_model_path

            path = demo_model_path()
        return cls(EngineConfig(model=str(path), device=device, dtype=dtype, **options))

    # ---- public API -------------------------------------------------------------------------
    def score(self, token_ids: list[int]) -> torch.Tensor:
        """Logits [T, V] float32 for every prefix of ``token_ids`` (no state is kept; the prefix cache is
        neither read nor filled)."""
        ids = list(token_ids)
        if not ids or len(ids) > self.max_model_len:
            raise RequestError(
                f"score() needs 1..{self.max_model_len} (max_model_len) tokens, got {len(ids)}"
            )
        seq = self._new_seq(ids, SamplingParams(max_tokens=1))
        seq.want_all_logits = True
        scratch = (
            StatePool(self.state_layout, 1, self.config.dense_device)
            if self.state_layout is not None
            else None
        )
        seq.state_slot = scratch.alloc() if scratch is not None else None
        try:
            while seq.uncomputed > 0:
                n = min(seq.uncomputed, self.config.max_batch_tokens)
                self.kv.reserve(seq.seq_id, seq.num_computed + n)
                self.runner.forward(ScheduledBatch([seq], [n], [True]), scratch)
                seq.num_computed += n
        finally:
            self.kv.free(seq.seq_id)
        return torch.cat(seq.logits)

    def generate(
        self, prompts, params: SamplingParams | list[SamplingParams] | None = None
    ) -> list[GenerationOutput]:
        """Complete prompts (text, token-id lists, or a list of either) together; outputs in input order."""
        single = isinstance(prompts, str) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        )
        plist = [prompts] if single else list(prompts)
        params = params or SamplingParams()
        plist_params = params if isinstance(params, list) else [params] * len(plist)
        seqs = [self.add_request(p, sp) for p, sp in zip(plist, plist_params)]
        while any(not s.finished for s in seqs):
            self.step()
        return [self._output(s) for s in seqs]

    def expert_stats(self) -> dict:
        """Expert-hierarchy counters: totals and per MoE layer (routes, device/CPU routes, hits, misses,
        fills, prefetched, evictions, bytes copied; ``cpu_us``: the host's own routes, ``wait_us``: the host
        waiting for the device's slot GEMM after them). Empty for the plain ``cpu`` backend."""
        b = self.model.backend
        if not isinstance(b, CachedBackend):
            return {}
        return {
            "backend": b.name,
            "slots": b.cache.num_slots,
            "total": b.totals(),
            "layers": {k: dict(v) for k, v in sorted(b.stats.items())},
        }

    def resize(self, total=None, kv=None, experts=None, states=None) -> dict:
        """Resize the memory pools now, between steps (bytes or strings like "512MiB"); running requests
        keep their pages and produce the same output. Raises ResizeRefused (nothing changed) when a part
        cannot be held. Returns the record kept in ``memory.history``."""
        return self.memory.resize(total=total, kv=kv, experts=experts, states=states)

    def prefix_stats(self) -> dict:
        """Prefix-cache counters: ids looked up at admission and of them reused, pages the cache holds
        now, pages it evicted so far; the KV pool (free and total pages); tokens run as prompt chunks
        (``prefill_tokens``: everything the cache did not serve is re-prefilled). Hybrid models resume
        only at state checkpoints: ``checkpoint_hits`` (admissions restored from one), the tokens they
        covered, checkpoints held / created / evicted and the budget in slots and bytes."""
        p, sch, ck, st = self.prefix, self.scheduler, self.checkpoints, self.scheduler.state
        return {
            "enabled": p is not None,
            "queried_tokens": sch.queried_tokens,
            "hit_tokens": sch.hit_tokens,
            "cached_pages": p.num_pages if p else 0,
            "evicted_pages": p.evicted_pages if p else 0,
            "free_pages": self.kv.free_pages,
            "total_pages": self.kv.num_pages,
            "page_size": self.kv.page_size,
            "prefill_tokens": sch.prefill_tokens,
            "checkpoint_hits": st.restored_hits if st else 0,
            "checkpoint_hit_tokens": st.restored_tokens if st else 0,
            "checkpoints": ck.count if ck else 0,
            "checkpoints_created": ck.created if ck else 0,
            "checkpoints_evicted": ck.evicted if ck else 0,
            "checkpoint_slots": ck.pool.num_slots if ck else 0,
            "checkpoint_bytes": ck.pool.nbytes if ck else 0,
        }

    def abort(self, seq: Sequence) -> None:
        """Stop ``seq`` (waiting or running) now: its KV pages are released at once (pages shared with the
        prefix cache or other sequences just lose its reference) and finish_reason becomes "abort".
        Call between steps; a no-op on a finished sequence (beyond dropping it if a failed step left it
        scheduled)."""
        self.scheduler.abort(seq)
        if seq.finished:
            return
        seq.finish_reason = "abort"
        seq.text = self.tokenizer.decode(
            seq.output_ids, skip_special_tokens=seq.params.skip_special_tokens
        )

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        constraint: TokenConstraint | None = None,
    ) -> Sequence:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise RequestError("prompt is empty")
        if len(ids) >= self.max_model_len:
            raise RequestError(
                f"prompt has {len(ids)} tokens; the context limit (max_model_len) is {self.max_model_len}"
            )
        bad = [i for i in ids if not 0 <= i < self.model_config.vocab_size]
        if bad:
            raise RequestError(
                f"token id {bad[0]} is outside the vocabulary [0, {self.model_config.vocab_size})"
            )
        seq = self._new_seq(ids, params)
        seq.constraint = constraint
        self.scheduler.add(seq)
        return seq

    def step(self) -> list[Sequence]:
        """One scheduler step: schedule -> run -> postprocess. Runs every running sequence's next token and
        prompt chunks of waiting ones in one forward. Returns the sequences that advanced.
        NaN/inf logits finish their sequences with finish_reason "error" and raise NonFiniteError
        after the rest of the step (its ``advanced``: the sequences that did advance)."""
        batch = self.scheduler.schedule()
        if batch is None:
            return []
        with small_forward(sum(batch.chunk), self.model.device):  # a decode step: one torch thread
            logits = self.runner.forward(batch)
            error = None
            if not all_finite(
                logits
            ):  # one check a step; the per-layer diagnosis only when it fails
                batch, logits, error = split_non_finite(self, batch, logits)
            self.runner.postprocess(batch, logits)
        self.scheduler.after_step(batch)
        if error is not None:  # the failed sequences are finished; the others advanced
            error.advanced = batch.seqs
            raise error
        return batch.seqs

    # ---- internals --------------------------------------------------------------------------
    def _new_seq(self, ids: list[int], params: SamplingParams) -> Sequence:
        gen = None
        if params.seed is not None:
            gen = torch.Generator().manual_seed(params.seed)
        return Sequence(next(self._ids), ids, params, generator=gen)

    def _output(self, s: Sequence) -> GenerationOutput:
        return GenerationOutput(
            s.prompt_ids, list(s.output_ids), s.text, s.finish_reason or "length"
        )


def _context_limit(asked: int | None, model_max: int) -> int:
    """max_model_len: the model's max_position_embeddings unless asked for less. More is refused (the model
    was not trained for it) unless FT_ALLOW_LONG_MAX_MODEL_LEN=1 says to use it anyway."""
    if asked is None:
        return model_max
    if asked < 1:
        raise FTError(f"max_model_len={asked} must be >= 1")
    if asked > model_max and not env.flag("FT_ALLOW_LONG_MAX_MODEL_LEN"):
        raise FTError(
            f"max_model_len={asked} is more than this model's max_position_embeddings={model_max}; "
            "set FT_ALLOW_LONG_MAX_MODEL_LEN=1 to run past the trained context anyway"
        )
    return asked
