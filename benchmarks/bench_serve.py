"""Serving throughput and latency of a running ft server under N concurrent streaming clients.

    uv run python benchmarks/bench_serve.py [--url URL] [--model PATH] [--clients 1,4,8]
        [--requests-per-client N] [--max-tokens N] [--prompt-tokens N] [--json FILE] [--api-key KEY]

For each concurrency level N, N asyncio clients each send --requests-per-client streaming chat
completions (POST /v1/chat/completions, stream=true, stream_options.include_usage, ignore_eos so every
request yields exactly --max-tokens tokens) one after another. Prompts are distinct per request (a
unique seeded word sequence, its word count set so the templated prompt is about --prompt-tokens tokens
as the server counts them), so prefix-cache reuse does not flatter the figures. Measured client-side
from SSE chunk arrival times:

- throughput: output tokens/s across all clients (tokens from each request's final usage chunk,
  over the level's wall time) and requests/s;
- TTFT p50/p99: request sent -> first chunk carrying generated text;
- ITL p50/p99: gaps between consecutive content chunks, pooled over the level's requests.

The server's own counters are scraped from GET /metrics before and after each level
(ft_generation_tokens_total and ft_prefix_cache_hit_tokens_total deltas). The batching gain is the
aggregate tok/s at each N over that at N=1, from the same run.

Without --url, a real server process is started (``python -m ft_serve.cli serve`` on a free port,
with --model / --api-key passed on), awaited on GET /health (120 s), and terminated (SIGTERM) at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx

_WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government number "
    "night point home water room mother area money story fact month lot right study book eye job word "
    "business issue side kind head house service friend father power hour game line end member law car "
    "city community name president team minute idea kid body information back parent face others level "
    "office door health person art war history party result change morning reason research girl guy "
    "moment air teacher force education river bridge garden engine window market signal pattern"
).split()


def _prompt(level: int, client: int, req: int, n_words: int) -> str:
    rng = random.Random(f"{level}/{client}/{req}")
    tag = f"{rng.randrange(10**8):08d}"  # differs from the first token on, so no shared prefix past the template
    words = [rng.choice(_WORDS) for _ in range(max(n_words, 1))]
    return f"{tag} Continue this list of words: " + " ".join(words)


def _pct(xs: list[float], q: float) -> float | None:
    """q-th percentile (0..100) with linear interpolation; None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _scrape(text: str) -> dict[str, float]:
    """Prometheus text -> {metric name: value summed over label sets}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value = line.rpartition(" ")
        name = name_part.split("{", 1)[0].strip()
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            pass
    return out


_SERVER_METRICS = {
    "server_generation_tokens": "ft_generation_tokens_total",
    "server_prompt_tokens": "ft_prompt_tokens_total",
    "server_prefix_cache_hit_tokens": "ft_prefix_cache_hit_tokens_total",
}


async def _metrics(client: httpx.AsyncClient, url: str) -> dict[str, float] | None:
    try:
        r = await client.get(f"{url}/metrics")
        r.raise_for_status()
        return _scrape(r.text)
    except httpx.HTTPError:
        return None


async def _one_request(client: httpx.AsyncClient, url: str, headers: dict, body: dict) -> dict:
    """One streaming chat completion; chunk arrival times taken as each SSE data line is read."""
    t0 = time.perf_counter()
    times: list[float] = []
    usage = None
    error = None
    try:
        async with client.stream(
            "POST", f"{url}/v1/chat/completions", json=body, headers=headers
        ) as r:
            if r.status_code != 200:
                error = f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"
            else:
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    now = time.perf_counter()
                    msg = json.loads(data)
                    if "error" in msg:
                        error = str(msg["error"].get("message"))
                        break
                    if msg.get("usage"):
                        usage = msg["usage"]
                    for ch in msg.get("choices") or ():
                        d = ch.get("delta") or {}
                        if d.get("content") or d.get("reasoning_content") or d.get("tool_calls"):
                            times.append(now)
    except httpx.HTTPError as e:
        error = f"{type(e).__name__}: {e}"
    t1 = time.perf_counter()
    return {"start": t0, "end": t1, "chunk_times": times, "usage": usage, "error": error}


async def _run_level(url: str, model: str, headers: dict, n_clients: int, args) -> dict:
    limits = httpx.Limits(max_connections=n_clients + 4, max_keepalive_connections=n_clients + 4)
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(600.0, connect=10.0), limits=limits
    ) as client:
        before = await _metrics(client, url)

        async def worker(c: int) -> list[dict]:
            res = []
            for i in range(args.requests_per_client):
                body = {
                    "model": model,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                    "max_tokens": args.max_tokens,
                    "temperature": 0,
                    "ignore_eos": True,
                    "messages": [
                        {"role": "user", "content": _prompt(n_clients, c, i, args.prompt_words)}
                    ],
                }
                res.append(await _one_request(client, url, headers, body))
            return res

        t0 = time.perf_counter()
        per_client = await asyncio.gather(*(worker(c) for c in range(n_clients)))
        wall = time.perf_counter() - t0
        after = await _metrics(client, url)

    reqs = [r for rs in per_client for r in rs]
    ok = [r for r in reqs if r["error"] is None]
    out_tokens = 0
    usage_missing = 0
    ttft, itl, prompt_toks = [], [], []
    for r in ok:
        if r["usage"] is not None:
            out_tokens += int(r["usage"].get("completion_tokens", 0))
            prompt_toks.append(int(r["usage"].get("prompt_tokens", 0)))
        else:
            usage_missing += 1
            out_tokens += len(r["chunk_times"])
        ts = r["chunk_times"]
        if ts:
            ttft.append(1000 * (ts[0] - r["start"]))
            itl.extend(1000 * (b - a) for a, b in itertools.pairwise(ts))
    res = {
        "clients": n_clients,
        "requests": len(reqs),
        "errors": len(reqs) - len(ok),
        "wall_s": wall,
        "output_tokens": out_tokens,
        "prompt_tokens_mean": sum(prompt_toks) / len(prompt_toks) if prompt_toks else None,
        "output_tok_s": out_tokens / wall,
        "requests_s": len(ok) / wall,
        "ttft_ms_p50": _pct(ttft, 50),
        "ttft_ms_p99": _pct(ttft, 99),
        "itl_ms_p50": _pct(itl, 50),
        "itl_ms_p99": _pct(itl, 99),
        "itl_samples": len(itl),
    }
    if usage_missing:
        res["usage_missing"] = usage_missing
    for key, name in _SERVER_METRICS.items():
        res[key] = (
            (after.get(name, 0.0) - before.get(name, 0.0))
            if before is not None and after is not None
            else None
        )
    errs = [r["error"] for r in reqs if r["error"]]
    if errs:
        res["first_error"] = errs[0]
    return res


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(args, log) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "ft_serve.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    if args.model:
        cmd += ["--model", args.model]
    if args.api_key:
        cmd += ["--api-key", args.api_key]
    print(f"starting server: {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"server exited with code {proc.returncode} before answering /health"
            )
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    _stop_server(proc)
    raise RuntimeError("server did not answer GET /health within 120 s")


def _stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _print_table(results: list[dict]) -> None:
    cols = [
        ("N", "clients", "d"),
        ("reqs", "requests", "d"),
        ("err", "errors", "d"),
        ("wall s", "wall_s", ".2f"),
        ("prompt tok", "prompt_tokens_mean", ".0f"),
        ("out tok/s", "output_tok_s", ".1f"),
        ("req/s", "requests_s", ".2f"),
        ("TTFT p50", "ttft_ms_p50", ".1f"),
        ("TTFT p99", "ttft_ms_p99", ".1f"),
        ("ITL p50", "itl_ms_p50", ".1f"),
        ("ITL p99", "itl_ms_p99", ".1f"),
        ("srv gen tok", "server_generation_tokens", ".0f"),
        ("srv prefix hit", "server_prefix_cache_hit_tokens", ".0f"),
    ]
    rows = [[_fmt(r.get(k), f) for _, k, f in cols] for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, (h, _, _) in enumerate(cols)]
    print("  ".join(h.rjust(w) for (h, _, _), w in zip(cols, widths)))
    for row in rows:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths)))
    print("(TTFT / ITL in ms, client-side; srv = GET /metrics deltas over the level)")


async def _calibrate(
    client: httpx.AsyncClient, url: str, headers: dict, model: str, target: int
) -> int:
    """Words per prompt so that the templated prompt is about ``target`` tokens with the server's tokenizer,
    from the usage of two 1-token requests (8 and 72 words). Falls back to one word per token."""
    counts = []
    for n in (8, 72):
        body = {
            "model": model,
            "max_tokens": 1,
            "temperature": 0,
            "messages": [{"role": "user", "content": _prompt(0, 0, n, n)}],
        }
        try:
            r = await client.post(f"{url}/v1/chat/completions", json=body, headers=headers)
            r.raise_for_status()
            counts.append(int(r.json()["usage"]["prompt_tokens"]))
        except (httpx.HTTPError, KeyError, TypeError, ValueError):
            return target
    per_word = (counts[1] - counts[0]) / 64
    if per_word <= 0:
        return target
    fixed = counts[0] - 8 * per_word
    return max(1, round((target - fixed) / per_word))


async def _main_async(args, url: str) -> dict:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    async with httpx.AsyncClient(timeout=30.0) as c:
        r = await c.get(f"{url}/v1/models", headers=headers)
        r.raise_for_status()
        models = r.json().get("data") or []
        model = models[0]["id"] if models else "default"
        warm = {
            "model": model,
            "stream": True,
            "max_tokens": 4,
            "ignore_eos": True,
            "temperature": 0,
            "messages": [{"role": "user", "content": "warm-up"}],
        }
        w = await _one_request(c, url, headers, warm)
        if w["error"]:
            raise RuntimeError(f"warm-up request failed: {w['error']}")
        args.prompt_words = await _calibrate(c, url, headers, model, args.prompt_tokens)
    results = []
    for n in args.clients:
        print(
            f"running N={n} ({n * args.requests_per_client} requests) ...",
            file=sys.stderr,
            flush=True,
        )
        results.append(await _run_level(url, model, headers, n, args))
    base = next((r["output_tok_s"] for r in results if r["clients"] == 1), None)
    gain = {
        str(r["clients"]): r["output_tok_s"] / base for r in results if base and r["clients"] != 1
    }
    return {
        "url": url,
        "model": model,
        "max_tokens": args.max_tokens,
        "prompt_tokens_target": args.prompt_tokens,
        "prompt_words": args.prompt_words,
        "requests_per_client": args.requests_per_client,
        "levels": results,
        "batching_gain_vs_n1": gain,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--url", default=None, help="base URL of a running ft server (default: start one)"
    )
    ap.add_argument(
        "--model",
        default=None,
        help="checkpoint for the server this starts (default: the demo model)",
    )
    ap.add_argument(
        "--clients", default="1,4,8", help="comma-separated concurrency levels (default: 1,4,8)"
    )
    ap.add_argument(
        "--requests-per-client",
        type=int,
        default=4,
        help="sequential requests per client (default: 4)",
    )
    ap.add_argument(
        "--max-tokens",
        type=int,
        default=64,
        help="output tokens per request (ignore_eos; default: 64)",
    )
    ap.add_argument(
        "--prompt-tokens",
        type=int,
        default=128,
        help="approximate prompt length in tokens, met by choosing a word count (default: 128)",
    )
    ap.add_argument(
        "--json", default=None, help="also write the figures to this file as one JSON object"
    )
    ap.add_argument(
        "--api-key", default=os.environ.get("FT_API_KEY"), help="API key (default: $FT_API_KEY)"
    )
    args = ap.parse_args()
    try:
        args.clients = [int(x) for x in args.clients.split(",") if x.strip()]
    except ValueError:
        ap.error("--clients takes comma-separated integers, e.g. 1,4,8")
    if (
        not args.clients
        or min(args.clients) < 1
        or args.requests_per_client < 1
        or args.max_tokens < 1
    ):
        ap.error("--clients, --requests-per-client and --max-tokens must be >= 1")
    if args.url and args.model:
        print(
            "note: --model is ignored with --url (the running server's model is used)",
            file=sys.stderr,
        )

    with tempfile.TemporaryFile(
        "w+b", prefix="ft-bench-serve-"
    ) as log:  # the started server's output
        proc = None
        try:
            if args.url:
                url = args.url.rstrip("/")
            else:
                proc, url = _start_server(args, log)
            out = asyncio.run(_main_async(args, url))
        except (RuntimeError, OSError, ValueError, KeyError, httpx.HTTPError) as e:
            print(f"bench_serve: error: {e}", file=sys.stderr)
            if not args.url:
                log.flush()
                log.seek(0)
                tail = log.read().decode(errors="replace")[-3000:]
                if tail:
                    print(f"--- server output (last 3000 chars) ---\n{tail}", file=sys.stderr)
            return 1
        finally:
            if proc is not None:
                _stop_server(proc)

    print(
        f"server {out['url']}  model {out['model']}  max_tokens {args.max_tokens}  prompt ~{args.prompt_tokens} "
        f"tokens ({out['prompt_words']} words)  {args.requests_per_client} requests/client  (streaming)"
    )
    _print_table(out["levels"])
    for n, g in out["batching_gain_vs_n1"].items():
        print(f"batching gain N={n} vs N=1: {g:.2f}x aggregate tok/s")
    for r in out["levels"]:
        if r.get("first_error"):
            print(f"N={r['clients']}: {r['errors']} failed requests; first: {r['first_error']}")
        if r.get("usage_missing"):
            print(
                f"N={r['clients']}: {r['usage_missing']} requests had no usage chunk (counted content chunks)"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0 if all(r["errors"] == 0 for r in out["levels"]) else 1


if __name__ == "__main__":
    sys.exit(main())
