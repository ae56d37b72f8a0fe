"""Test helpers that drive a real Engine: record the logits it sampled from, run one request to the end."""

from ft_core import SamplingParams


def sampled_logits(eng) -> dict[int, list]:
    """Wrap the engine's forward: seq_id -> logits rows [V] the engine sampled from (mid-prompt chunks
    dropped). The engine runs unchanged; the dict fills as it steps."""
    rows, forward = {}, eng.runner.forward

    def spy(b, *a):
        out = forward(b, *a)
        for i, (seq, n) in enumerate(zip(b.seqs, b.chunk)):
            if seq.num_computed + n == seq.total_len:
                rows.setdefault(seq.seq_id, []).append(out[i].clone())
        return out

    eng.runner.forward = spy
    return rows


def run(eng, ids, params: SamplingParams):
    """Add one request and step until it finishes; returns its Sequence."""
    seq = eng.add_request(ids, params)
    while not seq.finished:
        eng.step()
    return seq
