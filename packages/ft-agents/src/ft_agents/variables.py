"""The environment variables ft-agents reads, each named, documented and read here once (ft-agents depends on
nothing else of ft; ft-core and ft-serve read theirs in ft_core/env.py). An empty variable counts as unset.
Launched processes inherit the environment as a whole (launch.py, install.py, server.py): that is passing it
on (env.py filters what harnesses see), not reading options from it."""

from __future__ import annotations

import os

VARS = {
    "FT_AGENTS_HOME": "data home: the managed npm prefix and Node (default: $XDG_DATA_HOME/ft-agents)",
    "FT_AGENTS_STATE_DIR": "state home: launch folders and sessions (default: $XDG_STATE_HOME/ft-agents)",
    "XDG_DATA_HOME": "the user's data folder (default: ~/.local/share)",
    "XDG_STATE_HOME": "the user's state folder (default: ~/.local/state)",
    "FT_SERVER_URL": "the server a launch talks to when --server is not given",
    "FT_API_KEY": "the server's API key when --api-key is not given",
}


def text(name: str) -> str | None:
    """The variable's value, None when unset or empty (a name not in VARS is a KeyError)."""
    VARS[name]
    return os.environ.get(name) or None
