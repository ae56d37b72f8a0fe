"""``ft-agents launch HARNESS``: find the harness (install it with --install), find the server or start
``ft serve --model PATH``, write the harness's private config, run it with a scrubbed environment,
and stop the server it started when the harness exits."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ft_agents import harnesses, install, paths
from ft_agents.env import child_env
from ft_agents.errors import AgentsError
from ft_agents.harnesses import Harness, Plan, Setup, default_output_limit
from ft_agents.harnesses.base import LOCAL_KEY
from ft_agents.server import (
    ManagedServer,
    ServerInfo,
    Unreachable,
    default_url,
    estimate_from_checkpoint,
    normalize_url,
    query,
)

SHOWN_PLAIN = (
    "FT_AGENTS_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
)  # masked in --dry-run unless they hold LOCAL_KEY


@dataclass(frozen=True)
class LaunchOptions:
    harness: str
    server: str | None = None  # None: $FT_SERVER_URL, else the default local address
    model: str | None = None  # checkpoint to serve when no server answers
    api_key: str | None = None
    model_id: str | None = None
    context_length: int | None = None
    max_output_tokens: int | None = None
    serve_args: tuple[str, ...] = ()
    dry_run: bool = False
    install: bool = False
    harness_args: tuple[str, ...] = field(default_factory=tuple)
    cwd: Path = field(default_factory=Path.cwd)


def _find_or_install(h: Harness, o: LaunchOptions, err) -> tuple[Path | None, Path | None]:
    """(executable, node to run it with); (None, None) in a dry run when the harness is missing."""
    exe = install.find_harness(h)
    if exe is None and o.install and not o.dry_run:
        exe = install.install(h, log=err)
    node = None
    if h.node_min:
        node = install.find_node(h.node_min)
        if node is None and o.install and not o.dry_run:
            node = install.ensure_node(h.node_min, log=err)
        if node is None and not o.dry_run:
            system = shutil.which("node")
            have = install.node_version(system) if system else None
            raise AgentsError(
                f"{h.title} needs Node >= {h.node_min[0]}.{h.node_min[1]}; this machine has "
                f"{'v' + '.'.join(map(str, have)) if have else 'none'}. Run `ft-agents launch {h.name} "
                f"--install` to add one from npm (in {paths.node_prefix()})."
            )
    if exe is None and not o.dry_run:
        raise AgentsError(
            f"{h.title} (`{h.name}`) is not installed. Run `ft-agents launch {h.name} --install` "
            f"(npm package {h.package}, into {paths.npm_prefix()}) or `ft-agents install {h.name}`."
        )
    return exe, node


def _server(
    o: LaunchOptions, stack: contextlib.ExitStack, launch_dir: Path | None, err
) -> tuple[ServerInfo, str]:
    """The server's numbers and a line saying where they came from; may start ``ft serve``."""
    url, origin = (normalize_url(o.server), "--server") if o.server else default_url()
    try:
        info = query(url, o.api_key, o.model_id, o.context_length)
        if o.model and not o.server:
            print(
                f"ft-agents: a server already answers at {url}; using it instead of starting one for {o.model}",
                file=err,
            )
        return info, f"{url} ({origin})"
    except Unreachable as e:
        if o.server or not o.model:
            hint = (
                "--model starts `ft serve` only when --server is not given"
                if o.model
                else "pass --model PATH to start `ft serve` on a checkpoint, start one yourself with "
                "`ft serve --model PATH`, or point --server (or $FT_SERVER_URL) at a running server"
            )
            raise AgentsError(f"no server answers at {url} ({origin}: {e}); {hint}") from None
    if o.dry_run:
        est = estimate_from_checkpoint(o.model, list(o.serve_args))
        return est, f"would start `ft serve --model {o.model}` (numbers read from its config.json)"
    srv = ManagedServer(o.model, launch_dir / "ft-serve.log", o.api_key, list(o.serve_args))
    print(f"ft-agents: starting `{srv.display()}` (log: {srv.log_path}) ...", file=err, flush=True)
    stack.callback(srv.stop)
    url = srv.start()
    return query(
        url, o.api_key, o.model_id, o.context_length
    ), f"{url} (started by ft-agents; stopped at exit)"


def _print_plan(
    h: Harness,
    cmd: list[str],
    plan: Plan,
    env_removed: list[str],
    s: Setup,
    where: str,
    config_dir: Path,
    out,
) -> None:
    def shown(k: str, v: str) -> str:
        return "***" if k in SHOWN_PLAIN and v != LOCAL_KEY else v

    def p(text: str) -> None:
        print(text, file=out)

    p(f"harness: {h.title} ({h.name}), speaks {h.endpoint}")
    p(f"server:  {where}")
    unreported = "" if s.server.context_reported else " (not reported by the server)"
    p(
        f"model:   {s.model}, context {s.context} tokens{unreported}, output limit {s.output_limit} tokens"
    )
    p(f"config:  {config_dir} (private to this launch)")
    if plan.links:
        p(f"sessions: {s.sessions_dir} (kept across launches)")
    p("environment set:")
    for k, v in sorted(plan.env.items()):
        p(f"  {k}={shown(k, v)}")
    p(f"environment removed: {', '.join(env_removed) or '(none)'}")
    for link, target in plan.links.items():
        p(f"link {link} -> {target}")
    for path, text in plan.files.items():
        p(f"file {path}:")
        for line in text.rstrip("\n").splitlines():
            p(f"  {line}")
    for note in plan.notes:
        p(f"note: {note}")
    p(f"command: {shlex.join(cmd + plan.args)}")


def launch(o: LaunchOptions, out=sys.stdout, err=sys.stderr) -> int:
    """Run the harness; return its exit status (128 + N when a signal N ended it)."""
    h = harnesses.get(o.harness)
    exe, node = _find_or_install(h, o, err)
    with contextlib.ExitStack() as stack:
        launch_dir = None if o.dry_run else paths.new_launch_dir(h.name)
        info, where = _server(o, stack, launch_dir, err)
        config_dir = launch_dir or paths.planned_launch_dir(h.name)
        s = Setup(
            info,
            config_dir,
            o.cwd.resolve(),
            o.api_key or LOCAL_KEY,
            o.max_output_tokens or default_output_limit(info.context_length),
            paths.sessions_dir(h.name),
        )
        plan = h.plan(s, list(o.harness_args))
        env_set = dict(plan.env)
        if node:
            env_set["PATH"] = f"{node.parent}{os.pathsep}{os.environ.get('PATH', '')}"
        env, removed = child_env(os.environ, env_set)
        cmd = (
            install.command(h, exe, node) if exe else [f"<{h.name}: not installed; add --install>"]
        )
        if info.context_length < h.min_context:
            print(
                f"ft-agents: warning: {h.title} needs about {h.min_context} tokens of context to work "
                f"(its own prompt is large); the server offers {info.context_length}",
                file=err,
            )
        if o.dry_run:
            _print_plan(h, cmd, plan, removed, s, where, config_dir, out)
            return 0
        for path, text in plan.files.items():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            path.write_text(text)
            path.chmod(0o600)
        paths.link_sessions(s.sessions_dir, plan.links)
        print(
            f"ft-agents: {h.title} -> {info.url} (model {s.model}, context {s.context}, output {s.output_limit}); "
            f"config in {config_dir}"
            + (f"; sessions in {s.sessions_dir}" if plan.links else "")
            + (f"; removed from its environment: {', '.join(removed)}" if removed else ""),
            file=err,
            flush=True,
        )
        return _run_foreground(cmd + plan.args, env, o.cwd)


def _run_foreground(argv: list[str], env: dict[str, str], cwd: Path) -> int:
    """Run the harness in the foreground. Ctrl-C belongs to it (we ignore SIGINT, set after the start so
    that the harness does not inherit the ignore); SIGTERM and SIGHUP are passed on to it."""
    try:
        proc = subprocess.Popen(argv, env=env, cwd=cwd)
    except OSError as e:
        raise AgentsError(f"could not run {argv[0]}: {e}") from None

    def forward(sig, _frame):
        proc.send_signal(sig)

    handlers = {signal.SIGINT: signal.SIG_IGN, signal.SIGTERM: forward, signal.SIGHUP: forward}
    old = {sig: signal.signal(sig, h) for sig, h in handlers.items()}
    try:
        rc = proc.wait()
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    return 128 - rc if rc < 0 else rc
