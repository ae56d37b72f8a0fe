"""Where ft keeps files of its own: $FT_CACHE_DIR, else $XDG_CACHE_HOME/ft, else ~/.cache/ft."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    base = os.environ.get("FT_CACHE_DIR")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "ft"
