"""``ft-agents doctor``: Node and npm, each harness, the server, and whether the server's context length
suits each harness, with the command that fixes each problem. Exit status 1 when something needs a fix."""

from __future__ import annotations

import shutil
import sys

from ft_agents import install, paths
from ft_agents.errors import AgentsError
from ft_agents.harnesses import HARNESSES
from ft_agents.server import default_url, normalize_url, query


def _v(t) -> str:
    return "v" + ".".join(map(str, t)) if t else "none"


def doctor(server: str | None = None, api_key: str | None = None, out=sys.stdout) -> int:
    problems = 0

    def line(status: str, what: str, fix: str = "") -> None:
        nonlocal problems
        problems += status != "ok"
        print(f"[{status:>4}] {what}" + (f"\n       fix: {fix}" if fix else ""), file=out)

    node = install.find_node()
    npm = shutil.which("npm")
    line(
        "ok" if node else "FAIL",
        f"Node {_v(install.node_version(node)) if node else 'not found'}"
        + (f" at {node}" if node else ""),
        "" if node else "install Node.js with npm (https://nodejs.org)",
    )
    line(
        "ok" if npm else "FAIL",
        f"npm {'at ' + npm if npm else 'not found'}; managed prefix {paths.npm_prefix()}",
        "" if npm else "install npm (it comes with Node.js)",
    )
    for h in HARNESSES.values():
        hn = install.find_node(h.node_min) if h.node_min else node
        if h.node_min:
            need = f"{h.node_min[0]}.{h.node_min[1]}"
            have = f"{_v(install.node_version(hn))} at {hn}" if hn else "none here"
            line(
                "ok" if hn else "FAIL",
                f"{h.title} needs Node >= {need}: {have}",
                "" if hn else f"ft-agents install {h.name}   (adds Node {need}+ from npm)",
            )
        exe = install.find_harness(h)
        ver = install.harness_version(h, exe, hn) if exe and (hn or not h.node_min) else None
        if exe is None:
            line(
                "FAIL",
                f"{h.title}: not installed",
                f"ft-agents install {h.name}   (npm package {h.package})",
            )
        elif ver is None:
            line(
                "FAIL",
                f"{h.title}: {exe} does not run (an npm placeholder whose install step was skipped?)",
                f"ft-agents install {h.name}",
            )
        else:
            line("ok", f"{h.title}: {ver} at {exe}")
    url, origin = (normalize_url(server), "--server") if server else default_url()
    try:
        info = query(url, api_key)
    except AgentsError as e:
        line(
            "FAIL",
            f"server {url} ({origin}): {e}",
            "start one: `ft serve --model PATH` (or pass --server URL)",
        )
        return 1
    ctx = (
        f"context {info.context_length}" if info.context_reported else "no context length reported"
    )
    line("ok", f"server {url} ({origin}): model {info.model_id}, {ctx}")
    for h in HARNESSES.values():
        if not info.context_reported:
            line(
                "warn",
                f"{h.title} needs ~{h.min_context} tokens of context; the server does not say what it has",
                f"ft-agents launch {h.name} --context-length N",
            )
        elif info.context_length < h.min_context:
            line(
                "FAIL",
                f"{h.title} needs ~{h.min_context} tokens of context (its prompt and tools alone are large); "
                f"the server has {info.context_length}",
                f"serve with a longer context: `ft serve --model PATH --max-model-len {h.min_context}` "
                "(at most the model's own maximum), or a model made for long contexts",
            )
        else:
            line(
                "ok",
                f"{h.title}: context {info.context_length} >= {h.min_context}; it calls {h.endpoint}",
            )
    return 1 if problems else 0
