"""Prometheus metrics (``GET /metrics``), one registry per server: requests, TTFT and per-token
latency, tokens in/out, queue depth, running requests, prefix-cache hits, expert-cache counters, reasoning from elsewhere (``ft_foreign_reasoning_total``), the Python collector's pauses and frozen objects (server/heap.py)."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ft_serve.server.heap import GcPauses

_LAT = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self, loop, model_name: str):
        self.registry = r = CollectorRegistry()
        self.loop = loop
        lbl = ["model"]
        self.requests = Counter(
            "ft_requests",
            "HTTP API requests by endpoint and status",
            ["model", "endpoint", "status"],
            registry=r,
        )
        self.ttft = Histogram(
            "ft_time_to_first_token_seconds",
            "time from submission to the first output token",
            lbl,
            buckets=_LAT,
            registry=r,
        ).labels(model_name)
        self.itl = Histogram(
            "ft_time_per_output_token_seconds",
            "time between output tokens",
            lbl,
            buckets=_LAT,
            registry=r,
        ).labels(model_name)
        self.prompt_tokens = Counter(
            "ft_prompt_tokens", "prompt tokens processed", lbl, registry=r
        ).labels(model_name)
        self.generation_tokens = Counter(
            "ft_generation_tokens", "tokens generated", lbl, registry=r
        ).labels(model_name)
        self.finished_requests = Counter(
            "ft_request_finished", "finished generations by reason", ["model", "reason"], registry=r
        )
        self.foreign_reasoning = Counter(
            "ft_foreign_reasoning",
            "history items whose signed reasoning this server did not issue (another "
            "server or model, or an older secret): their plain text is kept as history, their blob dropped",
            ["model", "api", "kind"],
            registry=r,
        )
        self.model = model_name
        self.gc = GcPauses.install()
        r.register(_EngineCollector(self))

    def request(self, endpoint: str, status: int) -> None:
        self.requests.labels(self.model, endpoint, str(status)).inc()

    def foreign(self, api: str, kind: str) -> None:
        """One foreign item: ``api`` "anthropic" | "responses", ``kind`` "thinking" | "redacted_thinking" |
        "reasoning" | "compaction"."""
        self.foreign_reasoning.labels(self.model, api, kind).inc()

    def finished(self, g) -> None:
        self.prompt_tokens.inc(g.prompt_tokens)
        self.generation_tokens.inc(g.completion_tokens)
        self.finished_requests.labels(self.model, g.finish_reason or "unknown").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineCollector:
    """Gauges and counters read from the engine loop at scrape time (its last snapshot)."""

    def __init__(self, m: Metrics):
        self.m = m

    def collect(self):
        loop, model = self.m.loop, self.m.model
        yield from self._gc()
        g = GaugeMetricFamily(
            "ft_num_requests_waiting", "requests accepted but not yet running", labels=["model"]
        )
        g.add_metric([model], loop.waiting)
        yield g
        g = GaugeMetricFamily(
            "ft_num_requests_running", "requests in the engine's batch", labels=["model"]
        )
        g.add_metric([model], loop.running)
        yield g
        snap = loop.snapshot
        prefix = snap.get("prefix") or {}
        for key, name, doc in (
            (
                "hit_tokens",
                "ft_prefix_cache_hit_tokens",
                "prompt tokens served from the prefix cache",
            ),
            (
                "queried_tokens",
                "ft_prefix_cache_queried_tokens",
                "prompt tokens looked up in the prefix cache",
            ),
            (
                "prefill_tokens",
                "ft_prefill_tokens",
                "prompt tokens computed (re-prefilled: not served by the cache)",
            ),
            (
                "checkpoint_hits",
                "ft_prefix_checkpoint_hits",
                "requests resumed from a recurrent-state checkpoint",
            ),
            (
                "checkpoint_hit_tokens",
                "ft_prefix_checkpoint_hit_tokens",
                "prompt tokens those checkpoints covered",
            ),
            ("checkpoints_evicted", "ft_prefix_checkpoints_evicted", "state checkpoints evicted"),
        ):
            c = CounterMetricFamily(name, doc, labels=["model"])
            c.add_metric([model], float(prefix.get(key, 0)))
            yield c
        for key, name, doc in (
            ("checkpoints", "ft_prefix_checkpoints", "recurrent-state checkpoints held"),
            ("checkpoint_slots", "ft_prefix_checkpoint_slots", "state checkpoint budget in slots"),
        ):
            g = GaugeMetricFamily(name, doc, labels=["model"])
            g.add_metric([model], float(prefix.get(key, 0)))
            yield g
        mem = snap.get("memory") or {}
        g = GaugeMetricFamily(
            "ft_memory_bytes",
            "memory budget per pool (kv pages, expert slots, state slots)",
            labels=["model", "pool"],
        )
        for pool in ("kv", "experts", "states"):
            g.add_metric([model, pool], float(mem.get(pool, 0)))
        yield g
        c = CounterMetricFamily("ft_memory_resizes", "memory resizes applied", labels=["model"])
        c.add_metric([model], float(snap.get("resizes", 0)))
        yield c
        totals = (snap.get("experts") or {}).get("total", {})
        for key in (
            "routes",
            "hits",
            "misses",
            "fills",
            "cpu_routes",
            "device_routes",
            "evictions",
            "bytes_copied",
        ):
            c = CounterMetricFamily(
                f"ft_expert_cache_{key}", f"expert cache: {key.replace('_', ' ')}", labels=["model"]
            )
            c.add_metric([model], float(totals.get(key, 0)))
            yield c

    def _gc(self):
        pauses = self.m.gc
        c = CounterMetricFamily(
            "ft_python_gc_collections", "Python garbage collections", labels=["generation"]
        )
        s = CounterMetricFamily(
            "ft_python_gc_pause_seconds",
            "seconds Python garbage collections held the interpreter (every stream waits)",
            labels=["generation"],
        )
        for g in range(3):
            c.add_metric([str(g)], float(pauses.count[g]))
            s.add_metric([str(g)], pauses.seconds[g])
        yield c
        yield s
        g = GaugeMetricFamily(
            "ft_python_gc_frozen_objects",
            "objects alive after loading, kept out of garbage collection (gc.freeze)",
        )
        g.add_metric([], float(gc.get_freeze_count()))
        yield g
