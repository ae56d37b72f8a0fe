"""`ft serve` as a user runs it: a real process, one ready line with the URL, SIGTERM drains a running
stream and exits 0, the loaded heap frozen out of garbage collection (server/heap.py), bad flags exit
non-zero with a message."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx


def _start(*args, env=None):
    p = subprocess.Popen(
        [sys.executable, "-m", "ft_serve.cli", "serve", "--port", "0", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    deadline = time.time() + 120
    lines = []
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"ready at (http://\S+)", line)
        if m:
            return p, m.group(1), lines
    p.kill()
    raise AssertionError("no ready line: " + "".join(lines))


def test_serve_ready_line_then_sigterm_drains_a_running_stream(tmp_path):
    p, url, _ = _start(
        "--served-model-name", "demo", "--drain-seconds", "20", env={"FT_CACHE_DIR": str(tmp_path)}
    )
    try:
        assert httpx.get(url + "/v1/models").json()["data"][0]["id"] == "demo"
        metrics = httpx.get(url + "/metrics").text
        # the loaded process holds ~200 k objects (torch, transformers, the model); 20 k is far below that
        frozen = float(re.search(r"^ft_python_gc_frozen_objects (\S+)$", metrics, re.M).group(1))
        assert frozen > 20_000, metrics
        assert re.search(r'^ft_python_gc_pause_seconds_total\{generation="2"\} ', metrics, re.M)
        got, done = [], threading.Event()

        def client():
            body = {
                "model": "demo",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "max_tokens": 200,
                "ignore_eos": True,
                "stream_options": {"include_usage": True},
            }
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
                for line in r.iter_lines():
                    if line:
                        got.append(line)
            done.set()

        t = threading.Thread(target=client, daemon=True)
        t.start()
        while len(got) < 3:
            time.sleep(0.01)
        p.send_signal(signal.SIGTERM)  # mid-stream
        assert done.wait(60), "the running stream was cut by shutdown"
        assert got[-1] == "data: [DONE]"
        usage = json.loads([g for g in got if '"usage"' in g][-1][6:])["usage"]
        assert usage["completion_tokens"] == 200
        assert p.wait(60) == 0
    finally:
        if p.poll() is None:
            p.kill()


def test_serve_bad_flags_and_paths_fail_clearly(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "ft_serve.cli", "serve", "--model", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "nope" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "ft_serve.cli", "serve", "--max-running-requests", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "--max-running-requests" in r.stderr


def test_serve_help_lists_the_contract_flags():
    r = subprocess.run(
        [sys.executable, "-m", "ft_serve.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    for flag in (
        "--model",
        "--host",
        "--port",
        "--api-key",
        "--served-model-name",
        "--max-running-requests",
        "--max-model-len",
        "--tool-call-parser",
        "--reasoning-parser",
        "--moe-backend",
        "--moe-cache-size",
        "--kv-cache-size",
        "--no-prefix-cache",
        "--state-checkpoints",
        "--checkpoint-policy",
        "--elastic",
    ):
        assert flag in r.stdout, flag
