"""NaN/inf logits: split a step's failed sequences off and find where the first non-finite value
appeared. The serving path pays one ``all_finite`` over the step's logits [B, V] (``Engine.step``);
everything else here runs only once that check fails.

The diagnosis re-runs the first failed sequence's chunk alone with
``Decoder.forward(finite_log=...)`` (a finiteness check after the embedding and after each layer's
attention and MLP). It rewrites only that sequence's own KV slots, with the same values; a
recurrent layer reads the state the failed step left, so for hybrid models the layer named is
where the re-run first went non-finite.
"""

from __future__ import annotations

import logging
import math

import torch

from ft_core.errors import NonFiniteError
from ft_core.scheduler import ScheduledBatch

log = logging.getLogger("ft_core.engine")


def all_finite(t: torch.Tensor) -> bool:
    """No NaN/inf in ``t`` (any float dtype). First one sum (NaN and inf propagate through it; a few torch
    ops fewer than the exact check, each of which costs tens of microseconds in a decode step); only a sum
    that is not finite -- a NaN/inf, or finite values whose sum overflowed -- takes the exact check: one
    min/max reduction pass without a temporary (NaN propagates through both, +-inf shows in one)."""
    if t.numel() == 0:
        return True
    if math.isfinite(t.sum(dtype=torch.float32).item()):
        return True
    lo, hi = torch.aminmax(t)
    return bool(torch.isfinite(lo) & torch.isfinite(hi))


def split_non_finite(engine, b: ScheduledBatch, logits: torch.Tensor):
    """``logits`` [B, V] of batch ``b`` hold a NaN/inf. Finish the failed sequences
    (finish_reason "error", pages and snapshot slots freed, nothing cached) and return
    ``(batch, logits, error)``: the batch and logits rows of the sequences that go on, and the
    NonFiniteError to raise after the step."""
    ok = torch.isfinite(logits).all(dim=-1).tolist()  # [B]
    bad = [i for i, good in enumerate(ok) if not good]
    where = first_non_finite(engine, b, bad[0])
    seq_ids = tuple(b.seqs[i].seq_id for i in bad)
    log.error(
        "model produced non-finite values (NaN/inf logits) for sequence(s) %s; first in %s",
        list(seq_ids),
        where,
    )
    for i in bad:
        seq = b.seqs[i]
        if engine.checkpoints is not None and b.snaps:
            for _, slot in b.snaps[i]:  # filled this step, never hung on the tree
                engine.checkpoints.pool.free(slot)
        engine.scheduler.abort(seq)
        seq.finish_reason, seq.text = "error", ""
    keep = [i for i, good in enumerate(ok) if good]
    snaps = [b.snaps[i] for i in keep] if b.snaps else []
    kept = ScheduledBatch(
        [b.seqs[i] for i in keep], [b.chunk[i] for i in keep], [b.prefill[i] for i in keep], snaps
    )
    return kept, logits[keep], NonFiniteError(seq_ids, where)


def first_non_finite(engine, b: ScheduledBatch, i: int) -> str:
    """Where the forward of ``b.seqs[i]``'s chunk first holds a NaN/inf (re-run alone, without
    snapshots)."""
    trace: list[tuple[str, bool]] = []
    try:
        engine.runner.forward(
            ScheduledBatch([b.seqs[i]], [b.chunk[i]], [b.prefill[i]]), finite_log=trace
        )
    except Exception as e:  # noqa: BLE001 - a diagnosis must not hide the error it diagnoses
        log.warning("re-running the non-finite step to find the layer failed: %r", e)
    return next((where for where, finite in trace if not finite), "the LM head")
