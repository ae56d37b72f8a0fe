"""The ``ft-agents`` command (also ``python -m ft_agents`` and ``ft launch``).

ft-agents launch HARNESS [--server URL] [--model PATH] [--api-key KEY] [--dry-run] [--install] [-- ARGS]
ft-agents doctor [--server URL] [--api-key KEY]
ft-agents install [HARNESS[@VERSION] ...] [--upgrade]
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys

from ft_agents import __version__, variables
from ft_agents.errors import AgentsError
from ft_agents.harnesses import HARNESSES

_EPILOG = """examples:
  ft-agents launch claude                          # Claude Code on the server at $FT_SERVER_URL or 127.0.0.1:8000
  ft-agents launch codex --model /models/Qwen3-30B-A3B   # start `ft serve` on it if no server answers
  ft-agents launch opencode --server http://gpu-box:8000 -- run "explain main.py"
  ft-agents launch openclaw --install -- agent exec "fix the tests" --json"""


def _server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--server",
        metavar="URL",
        help="server base URL (default: $FT_SERVER_URL, else http://127.0.0.1:8000)",
    )
    p.add_argument(
        "--api-key",
        default=variables.text("FT_API_KEY"),
        metavar="KEY",
        help="the server's API key (default: $FT_API_KEY; none: a placeholder is sent)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ft-agents",
        description="Run coding agents on a local ft server "
        "(or any OpenAI/Anthropic-compatible endpoint) with private configuration.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"ft-agents {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    la = sub.add_parser(
        "launch",
        help="run a harness against the server",
        description="Run HARNESS against the server. Arguments after `--` go to the harness "
        '(e.g. `-- -p "..."` for Claude Code, `-- exec "..."` for Codex).',
    )
    la.add_argument("harness", metavar="HARNESS", help=" | ".join(HARNESSES))
    _server_args(la)
    la.add_argument(
        "--model",
        metavar="PATH",
        help="checkpoint to serve with `ft serve` when no server answers "
        "(started in the background, stopped when the harness exits)",
    )
    la.add_argument(
        "--model-id",
        metavar="ID",
        help="which of the server's models to use (default: the first listed)",
    )
    la.add_argument(
        "--context-length",
        type=int,
        metavar="N",
        help="override the context length the server reports",
    )
    la.add_argument(
        "--max-output-tokens",
        type=int,
        metavar="N",
        help="output tokens per request (default: a quarter of the context, 256..32000)",
    )
    la.add_argument(
        "--serve-args",
        default="",
        metavar="'ARGS'",
        help="more `ft serve` flags for --model, e.g. --serve-args='--max-model-len 65536'",
    )
    la.add_argument(
        "--dry-run",
        action="store_true",
        help="print the environment, files and command; run nothing",
    )
    la.add_argument(
        "--install",
        action="store_true",
        help="install the harness from npm (and Node for OpenClaw) if missing",
    )
    dr = sub.add_parser(
        "doctor", help="check Node, the harnesses, the server and its context length"
    )
    _server_args(dr)
    ins = sub.add_parser(
        "install",
        help="install harnesses from npm into ft-agents' own prefix",
        description="Install harnesses (default: all) into the managed npm prefix, running the "
        "install scripts npm skips, and Node >= 24.16 for OpenClaw when needed.",
    )
    ins.add_argument(
        "harnesses", nargs="*", metavar="HARNESS[@VERSION]", help=f"default: {' '.join(HARNESSES)}"
    )
    ins.add_argument(
        "--upgrade", action="store_true", help="reinstall 'latest' even when a version is installed"
    )
    return parser


def _launch(args, harness_args: list[str]) -> int:
    from pathlib import Path

    from ft_agents.launch import LaunchOptions, launch

    for flag in ("context_length", "max_output_tokens"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise AgentsError(f"--{flag.replace('_', '-')} must be >= 1")
    o = LaunchOptions(
        args.harness,
        args.server,
        args.model,
        args.api_key or None,
        args.model_id,
        args.context_length,
        args.max_output_tokens,
        tuple(shlex.split(args.serve_args)),
        args.dry_run,
        args.install,
        tuple(harness_args),
        Path.cwd(),
    )
    return launch(o)


def _install(args) -> int:
    from ft_agents import harnesses, install

    for spec in args.harnesses or list(HARNESSES):
        name, _, version = spec.partition("@")
        install.install(harnesses.get(name), version or "latest", upgrade=args.upgrade)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    harness_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, harness_args = argv[:i], argv[i + 1 :]
    args = build_parser().parse_args(argv)
    if harness_args and args.command != "launch":
        print(
            f"ft-agents {args.command}: error: arguments after `--` are for `launch` only",
            file=sys.stderr,
        )
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop a server we started
    try:
        if args.command == "launch":
            return _launch(args, harness_args)
        if args.command == "doctor":
            from ft_agents.doctor import doctor

            return doctor(args.server, args.api_key or None)
        return _install(args)
    except AgentsError as e:
        print(f"ft-agents {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `ft-agents ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
