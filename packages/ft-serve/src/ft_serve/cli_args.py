"""The flags of ``ft serve`` and ``ft generate``: ``engine_args`` (what becomes the EngineConfig)
and ``server_args`` (what becomes the ServerConfig: network, keys, limits, browsers, elastic)."""

from __future__ import annotations

import argparse

from ft_serve.parsers import PARSER_NAMES


def engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="checkpoint directory (Hugging Face layout); default: the built-in demo model")
    p.add_argument("--device", default="cpu", help="cpu (default; GPU execution arrives with the expert cache)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="activation dtype (default: float32)")
    p.add_argument("--expert-impl", default="auto", choices=["auto", "kernel", "torch"],
                   help="how routed experts run: ft_kernels C++ where supported (auto), always C++ (kernel), torch reference")
    p.add_argument("--max-model-len", type=int, default=None, help="context limit in tokens (default: the model's)")
    p.add_argument("--moe-backend", default="auto", choices=["auto", "cpu", "fill", "hybrid", "static"],
                   help="expert hierarchy: cpu (every expert on the host kernels; auto picks it without a GPU), "
                        "fill / hybrid / static (an expert cache of slots; with --device cpu a separate memory region)")
    p.add_argument("--moe-cache-slots", type=int, default=None, help="expert cache size in slots (one expert each)")
    p.add_argument("--moe-cache-fraction", type=float, default=None, help="expert cache size as a fraction of all experts")
    p.add_argument("--moe-cache-size", type=int, default=None, metavar="BYTES", help="expert cache size in bytes")
    p.add_argument("--moe-bandwidth-ratio", type=float, default=None, help="B_P / B_H for --moe-backend hybrid")
    p.add_argument("--kv-cache-size", default=None, metavar="BYTES", help="KV page pool (e.g. 4GiB; default 1GiB)")
    p.add_argument("--no-prefix-cache", action="store_true", help="do not share KV pages / states between requests")
    p.add_argument("--state-slots", type=int, default=None,
                   help="models with state layers (hybrids, GPT-OSS windows): sequences running at once, one live state "
                        "slot each (default 16)")
    p.add_argument("--window-state", default="auto", choices=["auto", "on", "off"],
                   help="sliding-window layers (GPT-OSS): keep only the last W tokens per sequence as state, "
                        "checkpointed like recurrent state (on), or paged KV of every token (off); "
                        "auto: on for models mixing windowed and full attention")
    p.add_argument("--linear-attn-impl", default="auto", choices=["auto", "torch", "fla"],
                   help="hybrid models: Gated DeltaNet layers through flash-linear-attention's Triton kernels (fla; "
                        "pip install 'ft-core[fla]', CUDA only) or torch; auto: fla on CUDA when installed")
    p.add_argument("--state-checkpoints", type=int, default=None,
                   help="models with state layers: prefix state checkpoint budget in slots (default 32, or as many small "
                        "slots as fit in 256 MiB, up to 256)")
    p.add_argument("--state-checkpoint-size", default=None, metavar="BYTES", help="... or in bytes (e.g. 2GiB)")
    p.add_argument("--checkpoint-policy", default="anchors", choices=["anchors", "every_n", "llama", "none"],
                   help="models with state layers: where state checkpoints go (default: anchors = think/tool/turn/prompt ends)")
    p.add_argument("--dense-format", default=None,
                   choices=["int4_sym", "int4_asym", "mxfp4", "nvfp4", "fp8_e4m3", "bf16", "f16"],
                   help="re-quantise the dense projections (attention, dense and shared-expert MLPs, LM head) at load "
                        "to this kernel format, as llama.cpp's quantised files do (default: keep them as stored)")
    p.add_argument("--int8-activations", action="store_true",
                   help="opt-in, not exact: int8 activations (q8_0, per 32 columns) into the integer dot products of "
                        "4-bit experts and 4-bit dense projections (faster on CPUs; error ~0.5%% of a product's size)")
    p.add_argument("--record-routing", metavar="FILE", default=None,
                   help="append every forward's routed expert ids to FILE (JSON lines; see bench_cache_policies.py)")


def _browser_args(s: argparse.ArgumentParser) -> None:
    """Who may call the server from a web page (server/guard.py; README "Browsers")."""
    s.add_argument("--allowed-origins", default="", metavar="ORIGINS",
                   help="comma-separated origins of web pages that may call the server "
                        "(CORS), e.g. http://localhost:3000; '*' in one matches up to the next "
                        "'/'; '*' alone: any page (default: none; other pages get 403, even "
                        "ones on localhost)")
    s.add_argument("--allowed-hosts", default="", metavar="NAMES",
                   help="comma-separated host names the server answers to besides IP "
                        "addresses, localhost and --host (default: none: other Host headers get "
                        "403, which blocks DNS rebinding); '*': any (behind a proxy that checks "
                        "names)")
    s.add_argument("--metrics-public", action="store_true",
                   help="serve /metrics without the API key (default: it needs the key when "
                        "one is set)")


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list flag -> its non-empty items."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def server_args(s: argparse.ArgumentParser) -> None:
    """``ft serve``'s own flags (ServerConfig)."""
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    s.add_argument("--port", type=int, default=8000, help="TCP port (default: 8000; 0 picks a free one)")
    s.add_argument("--api-key", default=None,
                   help="require this key (Authorization: Bearer KEY or x-api-key) on /v1 and "
                        "/metrics (default: --api-key-file, else $FT_API_KEY, else none; a key "
                        "given here is visible to other users in `ps`)")
    s.add_argument("--api-key-file", default=None, metavar="PATH",
                   help="read the API key from PATH")
    s.add_argument("--served-model-name", default=None, help="model id clients use (default: the checkpoint folder's name)")
    s.add_argument("--max-running-requests", type=int, default=16, help="requests decoding together (default: 16)")
    s.add_argument("--max-waiting-requests", type=int, default=256, help="queued requests before 503 (default: 256)")
    s.add_argument("--tool-call-parser", default="auto", choices=["auto", *PARSER_NAMES["tool"]],
                   help="tool-call format of the model's output (default: auto, from the checkpoint)")
    s.add_argument("--reasoning-parser", default="auto", choices=["auto", *PARSER_NAMES["reasoning"]],
                   help="reasoning format of the model's output (default: auto, from the checkpoint)")
    s.add_argument("--drain-seconds", type=float, default=30.0, help="on SIGINT/SIGTERM, time running requests get to finish")
    s.add_argument("--max-body-size", default="32MiB", metavar="BYTES",
                   help="largest request body (default 32MiB); a larger one gets 413")
    s.add_argument("--engine-stall-seconds", type=float, default=300.0,
                   help="/health answers 503 'wedged' when the engine has work and has not "
                        "finished a step for this long (default 300; a long CPU prefill is no stall)")
    s.add_argument("--admin-key", default=None,
                   help="key for /v1/admin/* (default: --admin-key-file, else $FT_ADMIN_KEY; "
                        "the API key also works; with neither, loopback only)")
    s.add_argument("--admin-key-file", default=None, metavar="PATH",
                   help="read the admin key from PATH")
    s.add_argument("--admin-allow-remote", action="store_true", help="answer /v1/admin/* from non-loopback addresses")
    _browser_args(s)
    s.add_argument("--elastic", default="off", choices=["off", "auto"],
                   help="auto: shrink the memory budget when other programs take device memory, grow it back later")
    s.add_argument("--elastic-source", default="cuda", metavar="cuda|file:PATH",
                   help="where --elastic auto reads free device memory (file:PATH holds a byte count: a simulation)")
    s.add_argument("--elastic-reserve", default="1GiB", metavar="BYTES",
                   help="device memory --elastic auto leaves free for other programs (default: 1GiB)")
    s.add_argument("--elastic-interval", type=float, default=1.0, help="seconds between free-memory polls (default: 1)")
    s.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"], help="HTTP server log level")
