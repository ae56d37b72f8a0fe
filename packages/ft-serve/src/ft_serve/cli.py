"""The ``ft`` command line. Subcommands: ``serve``, ``generate``, ``ctl``, ``probe``, ``convert``, ``launch``."""

from __future__ import annotations

import argparse
import sys

from ft_serve.parsers import PARSER_NAMES


def _engine_args(p: argparse.ArgumentParser) -> None:
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


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ft", description="ft: local inference for Mixture-of-Experts models")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the model over HTTP (OpenAI and Anthropic APIs)",
                       description="Serve the model on an OpenAI- and Anthropic-compatible HTTP endpoint: "
                                   "/v1/chat/completions, /v1/completions, /v1/responses, /v1/messages, "
                                   "/v1/messages/count_tokens, /v1/models, /health, /metrics.")
    _engine_args(s)
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
    s.set_defaults(func=_serve)
    g = sub.add_parser("generate", help="complete a prompt and print the completion",
                       description="Complete PROMPT with the model and print the completion to stdout.")
    _engine_args(g)
    g.add_argument("prompt", metavar="PROMPT", help="text to complete")
    g.add_argument("--max-tokens", type=int, default=64, help="most tokens to generate (default: 64)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default: 0)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("--seed", type=int, default=None, help="seed for sampling (same seed, same output)")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument("--chat", action="store_true", help="wrap PROMPT as a user message with the model's chat template")
    g.set_defaults(func=_generate)
    from ft_serve import ctl

    ctl.add_parser(sub)
    pr = sub.add_parser("probe", help="measure and cache this machine's expert bandwidths (B_H, B_P)",
                        description="Measure B_H (CPU expert kernel weight bytes/s) and B_P (pinned host->device "
                                    "copies), print them and cache them per machine and format.")
    pr.add_argument("--format", default="bf16", help="expert weight format (ft_kernels.FORMATS; default bf16)")
    pr.add_argument("--device", default="cpu", help="accelerator to measure B_P on (default: none)")
    pr.add_argument("--no-cache", action="store_true", help="measure again even when cached")
    pr.set_defaults(func=_probe)
    _add_convert_parser(sub)
    la = sub.add_parser("launch", add_help=False, help="run a coding agent on a server (= ft-agents launch ...)",
                        description="Run Claude Code, Codex, OpenCode or OpenClaw against a server: `ft launch "
                                    "HARNESS ...` is `ft-agents launch HARNESS ...` (see `ft launch --help`).")
    la.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def _add_convert_parser(sub) -> None:
    c = sub.add_parser("convert", help="write a checkpoint in the FTW fast-boot format",
                       description="Convert a Hugging Face checkpoint directory into an FTW directory: expert banks "
                                   "pre-merged in the kernels' layout, every tensor aligned for direct IO, an index "
                                   "with checksums, config and tokenizer copied in. `ft serve --model FTW_DIR` then "
                                   "loads at disk speed. Atomic: an interrupted conversion leaves nothing that loads.")
    c.add_argument("--model", required=True, help="checkpoint directory (Hugging Face layout)")
    c.add_argument("--out", required=True, help="FTW directory to create")
    c.add_argument("--format", default="auto",
                   help="expert weight format: auto (as stored, default), bf16, f16, fp8, mxfp4, nvfp4, int4, int4_asym")
    c.add_argument("--shard-size", default="2GiB", help="largest shard file (default 2GiB; e.g. 500MB, 1GiB)")
    c.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    c.set_defaults(func=_convert)


def _convert(args) -> int:
    from ft_core.loader.ftw_write import convert
    from ft_core.memory import parse_bytes

    r = convert(args.model, args.out, args.format, parse_bytes(args.shard_size, "--shard-size"), overwrite=args.overwrite)
    print(f"wrote {r['out']}: {r['bytes'] / 1e9:.2f} GB in {r['shards']} shard(s), experts {r['bank_fmt']}, "
          f"{r['seconds']:.1f}s")
    return 0


def _probe(args) -> int:
    import ft_kernels

    from ft_core import FTError
    from ft_core.probe import probe

    if args.format not in ft_kernels.FORMATS:
        raise FTError(f"--format {args.format!r} is not one of {', '.join(ft_kernels.FORMATS)}")
    r = probe(args.format, args.device, use_cache=not args.no_cache)
    print(f"machine: {r['key']}")
    print(f"B_H  CPU expert kernel ({args.format}): {r['B_H']:.1f} GB/s" + ("  (cached)" if r["cached"] else ""))
    if r["B_P"] is None:
        print("B_P  host->device copies: does not apply (no accelerator); the expert hierarchy runs every expert on the CPU")
    else:
        print(f"B_P  host->device copies: {r['B_P']:.1f} GB/s")
        print(f"B_H while copying: {r['B_H_during_copy']:.1f} GB/s")
        print(f"hybrid fill share B_P/B_H: {r['B_P'] / r['B_H']:.2f}")
    return 0


def _engine(args):
    from ft_core import Engine
    from ft_core.memory import parse_bytes

    extra = {"prefix_cache": not args.no_prefix_cache, "checkpoint_policy": args.checkpoint_policy,
             "linear_attn_impl": args.linear_attn_impl}
    if args.kv_cache_size is not None:
        extra["kv_cache_bytes"] = parse_bytes(args.kv_cache_size, "--kv-cache-size")
    if args.state_checkpoints is not None:
        extra["state_checkpoints"] = args.state_checkpoints
    if args.state_slots is not None:
        extra["state_slots"] = args.state_slots
    if args.window_state != "auto":
        extra["window_state"] = args.window_state == "on"
    if args.state_checkpoint_size is not None:
        extra["state_checkpoint_bytes"] = parse_bytes(args.state_checkpoint_size, "--state-checkpoint-size")
    return Engine.from_pretrained(args.model, device=args.device, dtype=args.dtype, expert_impl=args.expert_impl, **extra,
                                  max_model_len=args.max_model_len, moe_backend=args.moe_backend,
                                  moe_cache_slots=args.moe_cache_slots, moe_cache_fraction=args.moe_cache_fraction,
                                  moe_cache_bytes=args.moe_cache_size, moe_bandwidth_ratio=args.moe_bandwidth_ratio,
                                  record_routing=args.record_routing, dense_format=args.dense_format,
                                  int8_activations=args.int8_activations)


def _serve(args) -> int:
    from pathlib import Path

    from ft_core import FTError

    from ft_core.memory import parse_bytes

    from ft_serve.server.auth import load_key
    from ft_serve.server.config import ServerConfig
    from ft_serve.server.run import serve

    for flag in ("max_running_requests", "max_waiting_requests"):
        if getattr(args, flag) < 1:
            raise FTError(f"--{flag.replace('_', '-')} must be >= 1")
    max_body = parse_bytes(args.max_body_size, "--max-body-size")
    if max_body < 1 or args.engine_stall_seconds <= 0:
        raise FTError("--max-body-size and --engine-stall-seconds must be > 0")
    # keys before the model loads: a bad key file fails at once
    api_key = load_key(args.api_key, args.api_key_file, "FT_API_KEY", "--api-key")
    admin_key = load_key(args.admin_key, args.admin_key_file, "FT_ADMIN_KEY", "--admin-key")
    eng = _engine(args)
    name = args.served_model_name or (Path(args.model).resolve().name if args.model else "ft-demo")
    cfg = ServerConfig(model_name=name, host=args.host, port=args.port, api_key=api_key,
                       max_running_requests=args.max_running_requests, max_waiting_requests=args.max_waiting_requests,
                       tool_call_parser=args.tool_call_parser, reasoning_parser=args.reasoning_parser,
                       drain_seconds=args.drain_seconds, admin_key=admin_key,
                       max_body_size=max_body, engine_stall_seconds=args.engine_stall_seconds,
                       admin_allow_remote=args.admin_allow_remote, elastic=args.elastic,
                       elastic_source=args.elastic_source, elastic_reserve=parse_bytes(args.elastic_reserve, "--elastic-reserve"),
                       elastic_interval=args.elastic_interval,
                       allowed_origins=_names(args.allowed_origins),
                       allowed_hosts=_names(args.allowed_hosts), metrics_public=args.metrics_public)
    return serve(eng, cfg, args.log_level)


def _generate(args) -> int:
    from ft_core import SamplingParams

    eng = _engine(args)
    prompt = args.prompt
    if args.chat:
        prompt = eng.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                            top_k=args.top_k, min_p=args.min_p, seed=args.seed, stop=tuple(args.stop))
    ids = eng.tokenizer.encode(prompt, add_special_tokens=not args.chat)
    out = eng.generate([ids], params)[0]
    print(out.text)
    return 0


def _launch(rest: list[str]) -> int:
    """``ft launch ...`` runs ``python -m ft_agents launch ...`` as a child process: ft-agents sits above
    ft-serve (it may start `ft serve`), so ft-serve finds it by name and never imports it."""
    import importlib.util
    import signal
    import subprocess

    if importlib.util.find_spec("ft_agents") is None:
        print("ft launch: error: needs the ft-agents package (pip install ft-agents)", file=sys.stderr)
        return 2
    proc = subprocess.Popen([sys.executable, "-m", "ft_agents", "launch", *rest])
    old = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),  # Ctrl-C belongs to the agent
           signal.SIGTERM: signal.signal(signal.SIGTERM, lambda sig, _f: proc.send_signal(sig))}
    try:
        rc = proc.wait()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return 128 - rc if rc < 0 else rc


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["launch"]:
        return _launch(argv[1:])
    args = build_parser().parse_args(argv)
    from ft_core.errors import FTError

    try:
        return args.func(args)
    except FTError as e:
        print(f"ft {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
