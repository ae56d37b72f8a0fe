"""flash-linear-attention's gated delta rule kernels (layers/gated_delta_fla.py) against their torch twins
(layers/gated_delta.py), run on the CPU by Triton's interpreter in float32 (fla_interpret.py beside this
file: TRITON_INTERPRET=1 before fla is imported, two interpreter patches).

Everything that runs fla kernels runs in one fresh process (importing fla takes ~25 s, each kernel call
~1 s in the interpreter) that writes its numbers as JSON; the tests below assert on them: kernel parity
per shape, then a tiny Qwen3-Next engine with linear_attn_impl "fla" vs "torch" (score logits, greedy
tokens, a resume from a state checkpoint). Without fla installed those tests skip, and fail under CI.
The error paths (fla hidden, fla on a CPU without the interpreter, bad values) need no kernels.
"""

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ft_core import FTError
from ft_core.config import EngineConfig

HERE = Path(__file__).resolve().parents[1]  # ft-core/tests: fla_interpret
WORKSPACE_TESTS = HERE.parents[2] / "tests"  # tiny_checkpoints


def rule_tol(L: int, dk: int, dv: int) -> float:
    """max |fla - torch| / max |torch| of a gated delta rule over L tokens (float32; see
    tests/bounds.py): a token's contribution reaches an output through at most L state updates
    and Dk- and Dv-long dot products, each rounded (gamma(L + Dk + Dv)); 4 rounded stages per
    token (k.S, the delta, the rank-1 update, q.S); both forms err (x 2). A wrong decay, gate or
    state hand-over is O(1)."""
    from bounds import gamma

    return 2 * 4 * gamma(L + dk + dv)


# (L, Hk, Hv, Dk, Dv, initial state): one sequence through chunk_gated_delta_rule (chunks of 64)
CHUNK_CASES = [
    (1, 2, 4, 16, 32, True),  # one token, Hv = 2 Hk
    (37, 2, 4, 16, 32, False),  # below one chunk, zero state
    (64, 1, 1, 32, 16, True),  # exactly one chunk, Hv = Hk, Dk > Dv
    (100, 2, 4, 8, 12, True),  # two chunks, not a multiple of 64; the tiny model's Dk = 8, Dv = 12
    (128, 1, 2, 16, 16, False),  # two whole chunks
]
# (B, L, Hk, Hv, Dk, Dv, initial state): batched recurrent_gated_delta_rule
RECURRENT_CASES = [
    (3, 1, 2, 4, 16, 32, True),  # a decode step of three sequences
    (2, 5, 1, 2, 8, 12, False),  # several tokens per sequence
]

CODE = r"""
import json, os, sys, time
from pathlib import Path
here, spec = Path(sys.argv[1]), json.loads(sys.argv[2])
sys.path[:0] = [str(here), spec["workspace_tests"]]
import torch, torch.nn.functional as F
import fla_interpret
fla_interpret.patch()
from ft_core import Engine, FTError, SamplingParams
from ft_core.config import EngineConfig
from ft_core.layers import gated_delta as ref, gated_delta_fla as fla
import engine_spy, tiny_checkpoints

def inputs(g, pre, hk, hv, dk, dv, init):
    r = lambda *s: torch.randn(*pre, *s, generator=g)
    q, k, v = r(hk, dk), r(hk, dk), r(hv, dv)
    decay, beta = F.logsigmoid(r(hv) + 2), torch.rand(*pre, hv, generator=g)
    S0 = torch.randn(*pre[:-1], hv, dk, dv, generator=g) if init else torch.zeros(*pre[:-1], hv, dk, dv)
    return (q, k, v, decay, beta), S0

def compare(fn_fla, fn_ref, args, S0):
    kept = S0.clone()
    t = time.time()
    o, S = fn_fla(*args, S0)
    sec = time.time() - t
    ro, rS = fn_ref(*args, S0)
    return {"shape_ok": o.shape == ro.shape and S.shape == rS.shape and o.dtype == S.dtype == torch.float32,
            "err_o": (o - ro).abs().max().item(), "max_o": ro.abs().max().item(),
            "err_S": (S - rS).abs().max().item(), "max_S": rS.abs().max().item(),
            "state_kept": torch.equal(S0, kept), "seconds": round(sec, 2)}

def guarded(fn):
    try:
        return fn()
    except Exception as e:
        import traceback
        return {"error": traceback.format_exc()[-3000:]}

out = {"chunk": {}, "recurrent": {}}
for case in spec["chunk"]:
    L, hk, hv, dk, dv, init = case
    args, S0 = inputs(torch.Generator().manual_seed(L), (L,), hk, hv, dk, dv, init)
    out["chunk"][str(case)] = guarded(lambda: compare(fla.chunk_gated_delta_rule, ref.chunk_gated_delta_rule, args, S0))
for case in spec["recurrent"]:
    B, L, hk, hv, dk, dv, init = case
    args, S0 = inputs(torch.Generator().manual_seed(B * L), (B, L), hk, hv, dk, dv, init)
    out["recurrent"][str(case)] = guarded(
        lambda: compare(fla.recurrent_gated_delta_rule, ref.recurrent_gated_delta_rule, args, S0))

import bounds
ckpt = tiny_checkpoints.make_checkpoint("qwen3_next", Path(spec["tmp"]) / "qwen3_next")
greedy = lambda n: SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)

def engine_run(impl):
    t = time.time()
    eng = Engine.from_pretrained(ckpt, page_size=4, linear_attn_impl=impl)
    linear = [a for _, a, _, _ in eng.model.layers if hasattr(a, "chunk_rule")]
    res = {"layers": len(linear), "rules": sorted({m for a in linear for m in (a.chunk_rule.__module__, a.recurrent_rule.__module__)})}
    ids = eng.tokenizer.encode("The quick brown fox jumps over the lazy dog, then the cat sleeps.")
    res["logits"] = eng.score(ids).tolist()
    res["rel_tol"] = bounds.logits_tol(eng.model_config, 1.0, len(ids) + 8)  # longest context
    rows = engine_spy.sampled_logits(eng)
    outs = eng.generate([ids, ids[:7]], greedy(8))  # two prompts: decode steps of two sequences
    res["tokens"] = [o.token_ids for o in outs]
    chat = lambda text: eng.tokenizer.encode(eng.tokenizer.apply_chat_template(
        [{"role": "system", "content": "You are a coding agent. Answer briefly."}, {"role": "user", "content": text}]))
    engine_spy.run(eng, chat("What is in main.py?"), greedy(2))
    second = engine_spy.run(eng, chat("And util.py?"), greedy(4))  # resumes at the system prompt's checkpoint
    res["resume"] = {"cached_tokens": second.cached_tokens, "tokens": second.output_ids,
                     "checkpoint_hits": eng.prefix_stats()["checkpoint_hits"]}
    res["sampled"] = [torch.stack(r).tolist() for _, r in sorted(rows.items())]
    res["seconds"] = round(time.time() - t, 1)
    return res

out["engine"] = {impl: guarded(lambda: engine_run(impl)) for impl in ("torch", "fla")}
del os.environ["TRITON_INTERPRET"]  # read at each check: fla on a CPU outside the interpreter is refused
try:
    EngineConfig(model=str(ckpt), linear_attn_impl="fla").resolved_linear_attn_impl
    out["cpu_refusal"] = None
except FTError as e:
    out["cpu_refusal"] = str(e)
print("RESULT " + json.dumps(out))
"""


def _need_fla():
    try:  # the distribution, not `import fla`: conftest.py hides fla from pytest processes
        importlib.metadata.version("flash-linear-attention")
    except importlib.metadata.PackageNotFoundError:
        why = "flash-linear-attention is not installed (uv sync installs it with the dev group)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the fla parity tests: {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def fla_results(tmp_path_factory):
    """Runs every fla kernel check in one interpreter process; returns its JSON."""
    _need_fla()
    spec = {
        "chunk": CHUNK_CASES,
        "recurrent": RECURRENT_CASES,
        "workspace_tests": str(WORKSPACE_TESTS),
        "tmp": str(tmp_path_factory.mktemp("fla")),
    }
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run(
        [sys.executable, "-c", CODE, str(HERE), json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = [x for x in res.stdout.splitlines() if x.startswith("RESULT ")]
    assert res.returncode == 0 and lines, (res.stdout[-2000:], res.stderr[-4000:])
    return json.loads(lines[-1][len("RESULT ") :])


def _assert_close(r: dict, L: int, dk: int, dv: int):
    assert "error" not in r, r.get("error")
    assert r["shape_ok"] and r["state_kept"], r
    tol = rule_tol(L, dk, dv)
    assert r["err_o"] <= tol * r["max_o"] and r["err_S"] <= tol * r["max_S"], (r, tol)


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    CHUNK_CASES,
    ids=lambda c: "L{}-hk{}-hv{}-dk{}-dv{}-{}".format(*c[:5], "s0" if c[5] else "zero"),
)
def test_chunk_matches_torch(fla_results, case):
    """One sequence through fla's chunked kernel = the torch chunked form: outputs and final state."""
    L, _, _, dk, dv, _ = case
    _assert_close(fla_results["chunk"][str(list(case))], L, dk, dv)


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    RECURRENT_CASES,
    ids=lambda c: "B{}-L{}-hk{}-hv{}-dk{}-dv{}-{}".format(*c[:6], "s0" if c[6] else "zero"),
)
def test_recurrent_matches_torch(fla_results, case):
    """Batched sequences through fla's fused recurrent kernel = the torch recurrent form."""
    _, L, _, _, dk, dv, _ = case
    _assert_close(fla_results["recurrent"][str(list(case))], L, dk, dv)


def _engine(fla_results):
    e = fla_results["engine"]
    for impl in ("torch", "fla"):
        assert "error" not in e[impl], e[impl].get("error")
    assert e["torch"]["rules"] == ["ft_core.layers.gated_delta"] and e["torch"]["layers"] == 3
    assert e["fla"]["rules"] == ["ft_core.layers.gated_delta_fla"] and e["fla"]["layers"] == 3
    return e["torch"], e["fla"]


def _max_err(a, b) -> tuple[float, float]:
    import torch

    a, b = torch.tensor(a), torch.tensor(b)
    return (a - b).abs().max().item(), a.abs().max().item()


@pytest.mark.slow
def test_engine_score_matches_torch(fla_results):
    """Engine.score logits of a tiny Qwen3-Next (3 Gated DeltaNet layers) equal within float32 rounding."""
    t, f = _engine(fla_results)
    err, scale = _max_err(t["logits"], f["logits"])
    assert err <= t["rel_tol"] * scale, (err, scale)


@pytest.mark.slow
def test_engine_generation_and_resume_match_torch(fla_results):
    """Greedy tokens of two prompts decoded together, and a second request resumed from a state checkpoint
    the fla layers wrote: the same tokens, the sampled logits within rounding, the same checkpoint hit."""
    t, f = _engine(fla_results)
    assert f["tokens"] == t["tokens"] and all(len(x) == 8 for x in t["tokens"])
    assert (
        f["resume"] == t["resume"]
        and t["resume"]["checkpoint_hits"] == 1
        and t["resume"]["cached_tokens"] > 0
    )
    assert len(f["sampled"]) == len(t["sampled"])
    for a, b in zip(t["sampled"], f["sampled"]):
        err, scale = _max_err(a, b)
        assert err <= t["rel_tol"] * scale, (err, scale)


@pytest.mark.slow
def test_fla_on_cpu_without_interpreter_is_refused(fla_results):
    msg = fla_results["cpu_refusal"]
    assert msg is not None and "cuda" in msg and "linear_attn_impl" in msg, msg


def test_fla_missing_is_a_clear_error():
    """linear_attn_impl "fla" without the package: FTError naming it and how to install it (fla hidden)."""
    code = (
        "import sys; sys.modules['fla'] = None\n"
        "from ft_core import FTError\nfrom ft_core.config import EngineConfig\n"
        "c = EngineConfig(model='m', linear_attn_impl='fla')\n"
        "assert c.linear_attn_impl == 'fla' and EngineConfig(model='m').resolved_linear_attn_impl == 'torch'\n"
        "try:\n    c.resolved_linear_attn_impl\nexcept FTError as e:\n    print('ERR', e)\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}  # not the reason here: the missing package is
    res = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert (
        "ERR" in res.stdout
        and "flash-linear-attention" in res.stdout
        and "pip install" in res.stdout
    ), res.stdout


def test_linear_attn_impl_values():
    """Bad values are refused at construction; auto is torch on the CPU (fla is not even imported)."""
    with pytest.raises(FTError, match="linear_attn_impl 'cuda' is not one of auto, torch, fla"):
        EngineConfig(model="m", linear_attn_impl="cuda")
    assert EngineConfig(model="m").resolved_linear_attn_impl == "torch"
    assert EngineConfig(model="m", linear_attn_impl="torch").resolved_linear_attn_impl == "torch"
