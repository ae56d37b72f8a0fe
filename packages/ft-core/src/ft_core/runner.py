"""ModelRunner: runs one scheduled batch -- builds the ForwardBatch (ids, positions, KV slots, page tables,
state slots), runs the model, records routing, samples each finished prompt's next token and checks stops.
The Engine wires it (DESIGN §2); the scheduler decides what runs, the runner runs it.

Legend: B = sequences in the batch, T = packed tokens, V = vocabulary.
"""

from __future__ import annotations

import logging

import torch

from ft_core.cache.kv_cache import PagedKVCache
from ft_core.cache.state_store import StateBatch, StateLayout, StatePool
from ft_core.config import EngineConfig
from ft_core.constraint import mask_logits
from ft_core.decode_graph import DecodeGraphs, unsupported
from ft_core.layers.batch import ForwardBatch, padded_page_table
from ft_core.sampling import sample_one
from ft_core.scheduler import ScheduledBatch
from ft_core.sequence import Sequence
from ft_core.tokenizer.detok import StopScanner


class ModelRunner:
    def __init__(
        self,
        config: EngineConfig,
        model,
        kv: PagedKVCache,
        tokenizer,
        eos_ids: set[int],
        max_model_len: int,
        state_layout: StateLayout | None,
        live_states: StatePool | None,
        checkpoints,
    ):
        """``model``: the Decoder; ``checkpoints``: the StateCheckpoints of a hybrid model (or None)."""
        self.config, self.model, self.kv, self.tokenizer = config, model, kv, tokenizer
        self.eos_ids, self.max_model_len = eos_ids, max_model_len
        self.state_layout, self.live_states, self.checkpoints = (
            state_layout,
            live_states,
            checkpoints,
        )
        self.graphs = None  # the decode-step graphs (decode_graph.py), where asked for and possible
        if config.decode_graphs:
            why = unsupported(model, config)
            if why is None:
                self.graphs = DecodeGraphs(config, model, kv, max_model_len, live_states)
            else:
                logging.getLogger("ft_core.engine").warning(
                    "decode_graphs: decode steps run eagerly: %s", why
                )

    def forward(
        self, b: ScheduledBatch, live: StatePool | None = None, finite_log: list | None = None
    ) -> torch.Tensor:
        """Run the scheduled chunks; returns logits [B, V] of each sequence's last token in the chunk.
        ``live``: the pool of the sequences' recurrent states (default: the engine's);
        ``finite_log``: see ``Decoder.forward`` (the non-finite diagnosis)."""
        state = None
        if self.state_layout is not None:
            snaps = [
                [(p - s.num_computed, slot) for p, slot in sn]
                for s, sn in zip(b.seqs, b.snaps or [[]] * len(b.seqs))
            ]
            state = StateBatch(
                live or self.live_states,
                [s.state_slot for s in b.seqs],
                snaps,
                self.checkpoints.pool if self.checkpoints else None,
            )
        tables = [self.kv.tables[s.seq_id] for s in b.seqs]
        if all(n == 1 for n in b.chunk):  # a decode step: its index tensors from plain ints
            pos = [s.num_computed for s in b.seqs]
            ids = [s.token(p) for s, p in zip(b.seqs, pos)]
            slots = [self.kv.slot(s.seq_id, p) for s, p in zip(b.seqs, pos)]
            if (
                self.graphs is not None
                and live is None
                and finite_log is None
                and not b.seqs[0].want_all_logits
                and not any(b.snaps or [])  # (a state checkpoint taken this step: eagerly)
            ):  # replayed from a captured graph where a bucket takes it
                states = None if state is None else state.slots
                logits = self.graphs.logits(ids, pos, slots, tables, states)
                if logits is not None:
                    return logits
            fb = ForwardBatch.one_token(ids, pos, slots, tables, self.kv.page_size, state)
        else:
            fb = self._chunk_batch(b, tables, state)
        fb.to(self.model.device)
        log = [] if self.config.record_routing and finite_log is None else None
        h = self.model.forward(fb, self.kv, log, finite_log)
        if log is not None:
            self._record(b, log)
        # logits to the host, where sampling runs (a no-op when the model is there)
        if len(b.seqs) == 1 and b.seqs[0].want_all_logits:
            b.seqs[0].logits.append(self.model.logits(h).cpu())
        return self.model.logits(h if fb.Lq == 1 else h[fb.last_token_index()]).cpu()

    def _chunk_batch(self, b: ScheduledBatch, tables: list[list[int]], state) -> ForwardBatch:
        """The ForwardBatch of chunks of any length (prompt chunks; a decode step has ``one_token``)."""
        ids, pos, slots = [], [], []
        for seq, n in zip(b.seqs, b.chunk):
            start = seq.num_computed
            p = torch.arange(start, start + n)
            ids.append(torch.tensor(seq.all_ids[start : start + n]))
            pos.append(p)
            slots.append(self.kv.slots(seq.seq_id, p))
        return ForwardBatch(
            torch.cat(ids),
            torch.cat(pos),
            torch.cat(slots),
            padded_page_table(tables),
            list(b.chunk),
            [s.num_computed + n for s, n in zip(b.seqs, b.chunk)],
            self.kv.page_size,
            state,
        )

    def _record(self, b: ScheduledBatch, layers: list) -> None:
        """One JSON line per forward: phase ("prefill" when any prompt chunk ran, else "decode"), tokens per
        sequence, and per MoE layer the flat ids [T][k] (flat id = moe_layer * E + expert). Read by
        benchmarks/bench_cache_policies.py."""
        import json

        rec = {
            "phase": "prefill" if b.is_prefill else "decode",
            "seq_tokens": list(b.chunk),
            "num_experts": self.model.cfg.moe.num_experts,
            "layers": layers,
        }
        with open(self.config.record_routing, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def postprocess(self, b: ScheduledBatch, logits: torch.Tensor) -> None:
        """Sample each sequence whose prompt is computed (constraints, penalties, seeds), then check stops."""
        for i, (seq, n) in enumerate(zip(b.seqs, b.chunk)):
            seq.num_computed += n
            if seq.uncomputed > 0:  # mid-prompt chunk: nothing to sample yet
                continue
            p = seq.params
            banned = (
                sorted(self.eos_ids | set(p.stop_token_ids))
                if len(seq.output_ids) < p.min_tokens
                else None
            )
            row = logits[i]
            if (
                seq.constraint is not None
                and (allowed := seq.constraint.allowed(row.shape[-1])) is not None
            ):
                row = mask_logits(row, allowed)
            tok = sample_one(row, p, seq.prompt_ids, seq.output_ids, seq.generator, banned)
            seq.output_ids.append(tok)
            if seq.constraint is not None:
                seq.constraint.accept(tok)
            self._check_stop(seq, tok)

    def _check_stop(self, seq: Sequence, tok: int) -> None:
        """Set finish_reason (and the final text) once the sequence is done. Stop strings are checked
        incrementally (a StopScanner per sequence: the new token's text only); without them the text is
        decoded once, at the end."""
        p = seq.params
        if p.stop and seq.stop_scan is None:
            seq.stop_scan = StopScanner(
                lambda ids: self.tokenizer.decode(ids, skip_special_tokens=p.skip_special_tokens),
                tuple(p.stop),
            )
        hit = seq.stop_scan.push(tok) if seq.stop_scan is not None else False
        if (tok in self.eos_ids and not p.ignore_eos) or tok in p.stop_token_ids or hit:
            seq.finish_reason = "stop"
        elif len(seq.output_ids) >= p.max_tokens or seq.total_len >= self.max_model_len:
            seq.finish_reason = "length"
        elif seq.constraint is not None and seq.constraint.finished():
            seq.finish_reason = "stop"  # the structured output is complete
        if seq.finished:
            seq.text = (
                seq.stop_scan.text()
                if seq.stop_scan is not None
                else self.tokenizer.decode(
                    seq.output_ids, skip_special_tokens=p.skip_special_tokens
                )
            )
