"""Multi-turn agent conversations with the context edits real harnesses make between calls (our own
code, not taken from any client): ``generate.make_sessions`` builds them, ``harnesses`` holds the edits,
``content`` the deterministic text. Used by ``benchmarks/bench_prefix_cache.py``."""
