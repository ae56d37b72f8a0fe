"""benchmarks/gpu_check.py, the prepared GPU check, runs end to end on the CPU stand-in (``--device
cpu --quick``): CI has no GPU, and a script first run on a lent GPU must not fail on its own bugs."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_runs_on_the_cpu_stand_in(tmp_path):
    out = tmp_path / "gpu_check.json"
    res = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_check.py"),
            "--device",
            "cpu",
            "--quick",
            "--skip-tests",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "FT_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["ok"] and r["parity"] and all(p["ok"] for p in r["parity"])
    assert r["graph_parity"] and all(p["ok"] for p in r["graph_parity"])
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_check import TIMED

    assert "fill/callback" in TIMED and "hybrid/flag" in TIMED and "hybrid/flag/graph" in TIMED
    assert {t["policy"] for t in r["timing"]} == {"cpu", *TIMED}
    assert not [t for t in r["timing"] if "error" in t]
    assert r["probe"]["B_H"] > 0 and r["probe"]["branch_us"] > 0 and r["probe"]["B_P"] is None
    fill = [t for t in r["timing"] if t["resolved"] == "fill"]
    assert fill and all(t["bytes_copied_per_token"] > 0 for t in fill)


def test_gpu_check_refuses_a_missing_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        return
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cuda"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and "no CUDA device" in res.stderr
