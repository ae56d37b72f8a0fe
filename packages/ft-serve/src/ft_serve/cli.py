"""The ``ft`` command line. Subcommands: ``serve``, ``generate``, ``ctl``, ``probe``, ``convert``, ``launch``."""

from __future__ import annotations

import argparse
import re
import sys

from ft_serve.cli_args import engine_args, engine_kwargs, names, server_args


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ft", description="ft: local inference for Mixture-of-Experts models"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser(
        "serve",
        help="serve the model over HTTP (OpenAI and Anthropic APIs)",
        description="Serve the model on an OpenAI- and Anthropic-compatible HTTP endpoint: "
        "/v1/chat/completions, /v1/completions, /v1/responses, /v1/messages, "
        "/v1/messages/count_tokens, /v1/models, /health, /metrics.",
    )
    engine_args(s)
    server_args(s)
    s.set_defaults(func=_serve)
    g = sub.add_parser(
        "generate",
        help="complete a prompt and print the completion",
        description="Complete PROMPT with the model and print the completion to stdout.",
    )
    engine_args(g)
    g.add_argument("prompt", metavar="PROMPT", help="text to complete")
    g.add_argument(
        "--max-tokens", type=int, default=64, help="most tokens to generate (default: 64)"
    )
    g.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default: 0)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument(
        "--seed", type=int, default=None, help="seed for sampling (same seed, same output)"
    )
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument(
        "--chat",
        action="store_true",
        help="wrap PROMPT as a user message with the model's chat template",
    )
    g.set_defaults(func=_generate)
    from ft_serve import ctl

    ctl.add_parser(sub)
    pr = sub.add_parser(
        "probe",
        help="measure and cache this machine's expert bandwidths (B_H, B_P)",
        description="Measure B_H (CPU expert kernel weight bytes/s), B_P (pinned host->device "
        "copies) and the fixed cost of a layer step split between device and CPU, print them and "
        "cache them per machine and format.",
    )
    pr.add_argument(
        "--format", default="bf16", help="expert weight format (ft_kernels.FORMATS; default bf16)"
    )
    pr.add_argument("--device", default="cpu", help="accelerator to measure B_P on (default: none)")
    pr.add_argument("--no-cache", action="store_true", help="measure again even when cached")
    pr.set_defaults(func=_probe)
    _add_convert_parser(sub)
    la = sub.add_parser(
        "launch",
        add_help=False,
        help="run a coding agent on a server (= ft-agents launch ...)",
        description="Run Claude Code, Codex, OpenCode or OpenClaw against a server: `ft launch "
        "HARNESS ...` is `ft-agents launch HARNESS ...` (see `ft launch --help`).",
    )
    la.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def _add_convert_parser(sub) -> None:
    c = sub.add_parser(
        "convert",
        help="write a checkpoint in the FTW fast-boot format",
        description="Convert a Hugging Face checkpoint directory or a GGUF model (file, ollama:NAME, "
        "lmstudio:NAME; config and tokenizer written from its metadata) into an FTW directory: expert banks "
        "pre-merged in the kernels' layout, every tensor aligned for direct IO, an index "
        "with checksums, config and tokenizer copied in. `ft serve --model FTW_DIR` then "
        "loads at disk speed. Atomic: an interrupted conversion leaves nothing that loads.",
    )
    c.add_argument(
        "--model",
        required=True,
        help="checkpoint directory (Hugging Face layout), GGUF file, ollama:NAME or lmstudio:NAME",
    )
    c.add_argument("--out", required=True, help="FTW directory to create")
    c.add_argument(
        "--format",
        default="auto",
        help="expert weight format: auto (as stored, default), bf16, f16, fp8, mxfp4, nvfp4, int4, int4_asym, int8, "
        "q4_k, q5_k, q6_k (GGUF K-quants; dimensions in multiples of 256)",
    )
    c.add_argument(
        "--shard-size", default="2GiB", help="largest shard file (default 2GiB; e.g. 500MB, 1GiB)"
    )
    c.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    c.set_defaults(func=_convert)


def _convert(args) -> int:
    from ft_core.loader.ftw_write import convert
    from ft_core.memory import parse_bytes

    r = convert(
        args.model,
        args.out,
        args.format,
        parse_bytes(args.shard_size, "--shard-size"),
        overwrite=args.overwrite,
    )
    print(
        f"wrote {r['out']}: {r['bytes'] / 1e9:.2f} GB in {r['shards']} shard(s), experts {r['bank_fmt']}, "
        f"{r['seconds']:.1f}s"
    )
    return 0


def _probe(args) -> int:
    import ft_kernels

    from ft_core import FTError
    from ft_core.experts.probe import probe

    if args.format not in ft_kernels.FORMATS:
        raise FTError(f"--format {args.format!r} is not one of {', '.join(ft_kernels.FORMATS)}")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        raise FTError(f"--device {args.device!r} is not one of cpu, cuda, cuda:N")
    r = probe(args.format, args.device, use_cache=not args.no_cache)
    print(f"machine: {r['key']}")
    print(
        f"B_H  CPU expert kernel ({args.format}): {r['B_H']:.1f} GB/s"
        + ("  (cached)" if r["cached"] else "")
    )
    if r["B_P"] is None:
        print(
            "B_P  host->device copies: does not apply (no accelerator); the expert hierarchy runs every expert on the CPU"
        )
    else:
        print(f"B_P  host->device copies: {r['B_P']:.1f} GB/s")
        print(f"B_H while copying: {r['B_H_during_copy']:.1f} GB/s")
        print(f"hybrid fill share B_P/B_H: {r['B_P'] / r['B_H']:.2f}")
    if r.get("branch_us") is not None:  # records cached before it was measured lack it
        print(
            f"split step fixed cost: {r['branch_us']:.0f} us (queue, wait for and add a device branch)"
        )
    if r.get("cached_step_us") is not None:  # measured on an accelerator only
        print(
            f"layer step fixed cost: {r['cached_step_us']:.0f} us through the expert cache, "
            f"{r['host_step_us']:.0f} us with every expert on the CPU (dense layers on the device)"
        )
    return 0


def _engine(args):
    from ft_core import Engine

    kw = engine_kwargs(args)
    return Engine.from_pretrained(kw.pop("model"), **kw)


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
    cfg = ServerConfig(
        model_name=name,
        host=args.host,
        port=args.port,
        api_key=api_key,
        max_running_requests=args.max_running_requests,
        max_waiting_requests=args.max_waiting_requests,
        tool_call_parser=args.tool_call_parser,
        reasoning_parser=args.reasoning_parser,
        drain_seconds=args.drain_seconds,
        admin_key=admin_key,
        max_body_size=max_body,
        engine_stall_seconds=args.engine_stall_seconds,
        admin_allow_remote=args.admin_allow_remote,
        elastic=args.elastic,
        elastic_source=args.elastic_source,
        elastic_reserve=parse_bytes(args.elastic_reserve, "--elastic-reserve"),
        elastic_interval=args.elastic_interval,
        allowed_origins=names(args.allowed_origins),
        allowed_hosts=names(args.allowed_hosts),
        metrics_public=args.metrics_public,
    )
    return serve(eng, cfg, args.log_level)


def _generate(args) -> int:
    from ft_core import SamplingParams

    eng = _engine(args)
    prompt = args.prompt
    if args.chat:
        prompt = eng.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True
        )
    params = SamplingParams(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        min_p=args.min_p,
        seed=args.seed,
        stop=tuple(args.stop),
    )
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
        print(
            "ft launch: error: needs the ft-agents package (pip install ft-agents)", file=sys.stderr
        )
        return 2
    proc = subprocess.Popen([sys.executable, "-m", "ft_agents", "launch", *rest])
    old = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),  # Ctrl-C belongs to the agent
        signal.SIGTERM: signal.signal(signal.SIGTERM, lambda sig, _f: proc.send_signal(sig)),
    }
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
