"""Where ft keeps files of its own: $FT_CACHE_DIR, else $XDG_CACHE_HOME/ft, else ~/.cache/ft."""

from __future__ import annotations

from pathlib import Path

from ft_core import env


def cache_dir() -> Path:
    base = env.text("FT_CACHE_DIR")
    if base:
        return Path(base)
    return Path(env.text("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "ft"
