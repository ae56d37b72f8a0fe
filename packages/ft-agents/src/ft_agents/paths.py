"""Where ft-agents keeps its files; never inside a harness's own configuration folders.

- data home ($FT_AGENTS_HOME, else $XDG_DATA_HOME/ft-agents): the managed npm prefix and Node.
- state home ($FT_AGENTS_STATE_DIR, else $XDG_STATE_HOME/ft-agents): one private folder per launch
  (launches/), and each harness's conversations, kept across launches (sessions/<harness>/, linked from
  the launch folders; pruning a launch folder removes the links, never what they point to).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from ft_agents import variables

KEEP_LAUNCHES = 20  # the newest launch folders kept; older ones are removed when a new one is made


def _xdg(var: str, default: str) -> Path:
    return Path(variables.text(var) or Path.home() / default)


def data_home() -> Path:
    if home := variables.text("FT_AGENTS_HOME"):
        return Path(home)
    return _xdg("XDG_DATA_HOME", ".local/share") / "ft-agents"


def state_home() -> Path:
    if home := variables.text("FT_AGENTS_STATE_DIR"):
        return Path(home)
    return _xdg("XDG_STATE_HOME", ".local/state") / "ft-agents"


def npm_prefix() -> Path:
    """The managed npm prefix that ``--install`` installs harnesses into (bin/ and lib/node_modules/)."""
    return data_home() / "npm"


def node_prefix() -> Path:
    """The managed prefix of the Node from npm's ``node`` package (for OpenClaw on an older system Node)."""
    return data_home() / "node"


def sessions_dir(harness: str) -> Path:
    """Where a harness's conversations are kept across launches (made 0700 by ``link_sessions``)."""
    return state_home() / "sessions" / harness


def link_sessions(store: Path, links: dict[Path, Path]) -> None:
    """Make ``store`` (0700, as is its parent) and each target folder in it, and a symlink to each target at
    its link path (in a launch folder)."""
    store.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    store.mkdir(exist_ok=True, mode=0o700)
    for link, target in links.items():
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        link.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        link.symlink_to(target, target_is_directory=True)


def new_launch_dir(harness: str) -> Path:
    """Make a private (0700) folder for one launch and prune the oldest beyond ``KEEP_LAUNCHES``."""
    root = state_home() / "launches"
    root.mkdir(parents=True, exist_ok=True)
    path = Path(
        tempfile.mkdtemp(prefix=f"{time.strftime('%Y%m%d-%H%M%S')}-{harness}-", dir=root)
    )  # 0700
    old = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)[
        :-KEEP_LAUNCHES
    ]
    for p in old:
        shutil.rmtree(p, ignore_errors=True)  # removes symlinks, never follows them
    return path


def planned_launch_dir(harness: str) -> Path:
    """The folder a launch would use (for --dry-run, which creates nothing)."""
    return state_home() / "launches" / f"{time.strftime('%Y%m%d-%H%M%S')}-{harness}-XXXXXXXX"
