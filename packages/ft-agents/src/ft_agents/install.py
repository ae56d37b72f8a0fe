"""Finding and installing harnesses: a managed npm prefix (``paths.npm_prefix()``), the package's own
install scripts run when npm skipped them (npm 11 does for Claude Code and OpenCode, leaving a
placeholder executable), and a Node >= 24.16 from npm's ``node`` package for OpenClaw."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ft_agents import paths
from ft_agents.errors import AgentsError
from ft_agents.harnesses import Harness

NODE_PACKAGE = "node@24"  # npm's `node` package: the official binaries, by version
_SCRIPTS = ("preinstall", "install", "postinstall")


def _run(argv: list[str], env: dict | None = None, timeout: float = 60, cwd: Path | None = None):
    try:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(argv, 127, "", str(e))


def node_version(node: str | Path) -> tuple[int, int, int] | None:
    r = _run([str(node), "--version"], timeout=20)
    m = re.match(r"v?(\d+)\.(\d+)\.(\d+)", r.stdout.strip()) if r.returncode == 0 else None
    return tuple(int(x) for x in m.groups()) if m else None


def node_ok(version: tuple[int, ...] | None, minimum: tuple[int, int]) -> bool:
    """``minimum`` within its major, or any later major except 25 (OpenClaw: >=24.16 <25 || >=26.1)."""
    if version is None:
        return False
    if version[0] == minimum[0]:
        return version[:2] >= minimum
    return version[0] > minimum[0] and version[0] != 25


def find_node(minimum: tuple[int, int] | None = None) -> Path | None:
    """A Node satisfying ``minimum``: the managed one first, then ``node`` on PATH."""
    for cand in (paths.node_prefix() / "bin" / "node", shutil.which("node")):
        if (
            cand
            and Path(cand).exists()
            and (minimum is None or node_ok(node_version(cand), minimum))
        ):
            return Path(cand)
    return None


def find_harness(h: Harness) -> Path | None:
    """The harness's executable: the managed prefix first, then PATH."""
    managed = paths.npm_prefix() / "bin" / h.name
    if managed.exists():
        return managed
    found = shutil.which(h.name)
    return Path(found) if found else None


def command(h: Harness, exe: Path, node: Path | None) -> list[str]:
    """The argv prefix that runs ``exe``: through ``node`` when the harness needs a particular Node."""
    return [str(node), str(exe.resolve())] if h.node_min and node else [str(exe)]


def harness_version(h: Harness, exe: Path, node: Path | None = None) -> str | None:
    """``HARNESS --version``'s first line, or None when it does not run (e.g. an npm placeholder)."""
    r = _run([*command(h, exe, node), "--version"], env=_env_with_node(node), timeout=60)
    out = (r.stdout.strip() or r.stderr.strip()).splitlines()
    return out[0].strip() if r.returncode == 0 and out else None


def _env_with_node(node: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if node:
        env["PATH"] = f"{node.parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _npm() -> str:
    npm = shutil.which("npm")
    if not npm:
        raise AgentsError(
            "npm is not installed: install Node.js (which brings npm), e.g. from https://nodejs.org "
            "or your package manager, then try again"
        )
    return npm


def _npm_install(prefix: Path, spec: str, node: Path | None, log) -> bool:
    """``npm install -g --prefix PREFIX SPEC``; True when npm says it skipped the package's install scripts."""
    prefix.mkdir(parents=True, exist_ok=True)
    argv = [_npm(), "install", "--global", "--prefix", str(prefix), "--no-fund", "--no-audit", spec]
    print(f"ft-agents: npm {' '.join(argv[1:])}", file=log, flush=True)
    r = _run(argv, env=_env_with_node(node), timeout=1800)
    if r.returncode != 0:
        raise AgentsError(
            f"`npm install {spec}` failed ({r.returncode}):\n{(r.stderr or r.stdout)[-2000:]}"
        )
    name = spec.rsplit("@", 1)[0] if spec.rfind("@") > 0 else spec
    return any(
        "install-scripts" in ln and f" {name}@" in ln for ln in (r.stderr + r.stdout).splitlines()
    )


def _package_dir(prefix: Path, package: str) -> Path:
    return prefix / "lib" / "node_modules" / package


def installed_version(prefix: Path, package: str) -> str | None:
    try:
        return json.loads((_package_dir(prefix, package) / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def _run_package_scripts(pkg_dir: Path, node: Path | None, log) -> None:
    """Run the package's install scripts in its folder, as npm would have, then link its executables
    into the prefix's bin/ (npm links only files that existed when it installed)."""
    meta = json.loads((pkg_dir / "package.json").read_text())
    scripts = meta.get("scripts", {})
    for name in _SCRIPTS:
        if name in scripts:
            print(
                f"ft-agents: running {pkg_dir.name}'s {name} script: {scripts[name]}",
                file=log,
                flush=True,
            )
            r = _run(
                ["sh", "-c", scripts[name]], env=_env_with_node(node), cwd=pkg_dir, timeout=900
            )
            if r.returncode != 0:
                raise AgentsError(
                    f"{pkg_dir.name}'s {name} script failed ({r.returncode}):\n"
                    f"{(r.stderr or r.stdout)[-2000:]}"
                )
    bins = meta.get("bin") or {}
    bins = {meta["name"].split("/")[-1]: bins} if isinstance(bins, str) else bins
    prefix_bin = pkg_dir.parents[2 if meta["name"].startswith("@") else 1].parent / "bin"
    for name, rel in bins.items():
        link, target = prefix_bin / name, (pkg_dir / rel).resolve()
        if target.exists() and not link.exists():
            prefix_bin.mkdir(parents=True, exist_ok=True)
            link.unlink(missing_ok=True)  # a dangling link
            link.symlink_to(os.path.relpath(target, prefix_bin))


def ensure_node(minimum: tuple[int, int], log=sys.stderr) -> Path:
    """A Node >= ``minimum``: one already here, else npm's ``node`` package in the managed prefix."""
    if node := find_node(minimum):
        return node
    prefix = paths.node_prefix()
    skipped = _npm_install(prefix, NODE_PACKAGE, None, log)
    node = prefix / "bin" / "node"
    if skipped or not node_ok(node_version(node), minimum):
        _run_package_scripts(_package_dir(prefix, "node"), None, log)
    if not node_ok(node_version(node), minimum):
        raise AgentsError(
            f"installing {NODE_PACKAGE} from npm gave no working Node >= {minimum[0]}.{minimum[1]} "
            f"in {prefix}; install one from https://nodejs.org"
        )
    return node


def install(h: Harness, version: str = "latest", upgrade: bool = False, log=sys.stderr) -> Path:
    """Install ``h`` into the managed prefix unless a working copy of ``version`` is there; return its
    executable. Idempotent: a second call with the same arguments does nothing."""
    prefix = paths.npm_prefix()
    node = ensure_node(h.node_min, log) if h.node_min else find_node()
    exe = prefix / "bin" / h.name
    have = installed_version(prefix, h.package)
    wanted = have is not None and (version == have or (version == "latest" and not upgrade))
    if not (wanted and exe.exists() and harness_version(h, exe, node)):
        skipped = False if wanted else _npm_install(prefix, f"{h.package}@{version}", node, log)
        if skipped or not harness_version(
            h, exe, node
        ):  # npm skipped the package's own install step
            _run_package_scripts(_package_dir(prefix, h.package), node, log)
    if installed_version(prefix, h.package) == "0.0.1":
        raise AgentsError(
            f"npm installed the empty 0.0.1 placeholder of {h.package} (Node too old?)"
        )
    if not (v := harness_version(h, exe, node)):
        raise AgentsError(
            f"{exe} does not run after installing {h.package}@{version}; try `{exe} --version`"
        )
    print(f"ft-agents: {h.title} {v} at {exe}", file=log, flush=True)
    return exe
