"""The environment variables ft-core and ft-serve read, each named, documented and parsed here once (the C++
kernels read their own: FT_CPU_ISA, FT_BF16_NIBBLES, FT_BF16_I16, FT_AMX, FT_AVX_VNNI, FT_NUM_THREADS, FT_SPIN_US;
ft-agents: ft_agents/variables.py).
An empty variable counts as unset. A value that does not parse is an FTError naming the variable."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ft_core.errors import FTError


@dataclass(frozen=True)
class Var:
    name: str
    default: str | None  # the value when unset
    help: str


VARS = {
    v.name: v
    for v in (
        Var("FT_CACHE_DIR", None, "where ft keeps its own files (default: $XDG_CACHE_HOME/ft)"),
        Var("XDG_CACHE_HOME", None, "the user's cache folder (default: ~/.cache)"),
        Var("FT_LOAD_THREADS", "8", "threads reading checkpoint files while loading"),
        Var(
            "OLLAMA_MODELS",
            None,
            "Ollama's model store, for --model ollama:NAME (default: ~/.ollama/models)",
        ),
        Var(
            "LMSTUDIO_MODELS",
            None,
            "LM Studio's models folder, for --model lmstudio:NAME (default: ~/.lmstudio/models, "
            "else ~/.cache/lm-studio/models)",
        ),
        Var("FT_LOAD_HUGEPAGES", "0", "1: FTW banks in huge-page host buffers"),
        Var(
            "FT_ALLOW_LONG_MAX_MODEL_LEN",
            "0",
            "1: allow --max-model-len beyond the model's max_position_embeddings",
        ),
        Var(
            "TRITON_INTERPRET",
            "0",
            "1: Triton kernels run on the CPU under Triton's interpreter (tests)",
        ),
        Var(
            "FT_API_KEY",
            None,
            "the server's API key (after --api-key and --api-key-file); ft ctl's key",
        ),
        Var(
            "FT_ADMIN_KEY",
            None,
            "the server's admin key (after --admin-key and --admin-key-file); ft ctl's key",
        ),
        Var("FT_SERVER_URL", "http://127.0.0.1:8000", "the server ft ctl talks to"),
    )
}


def text(name: str) -> str | None:
    """The variable's value, or its default when unset or empty (a name not in VARS is a KeyError)."""
    return os.environ.get(name) or VARS[name].default


def flag(name: str) -> bool:
    """True when the variable is "1"."""
    return text(name) == "1"


def integer(name: str, minimum: int = 1) -> int:
    """The variable as an integer >= ``minimum``."""
    v = text(name)
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise FTError(f"${name}={v!r}: expected an integer") from None
    if n < minimum:
        raise FTError(f"${name}={n}: must be >= {minimum}")
    return n
