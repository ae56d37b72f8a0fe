"""The tool-call families, one file each, by ``--tool-call-parser`` name.

Adding a family: a module with a ``ToolFamily`` subclass (base.py says what it provides), and its
instance in ``FAMILIES`` below.
"""

from __future__ import annotations

from .base import ToolFamily
from .deepseek_v3 import DeepseekV3
from .glm45 import Glm45
from .harmony import Harmony
from .hermes import Hermes
from .qwen3_coder import Qwen3Coder

FAMILIES: dict[str, ToolFamily] = {
    f.name: f for f in (Hermes(), Qwen3Coder(), DeepseekV3(), Glm45(), Harmony())
}
NAMES = tuple(FAMILIES)


def family(name: str) -> ToolFamily:
    """The family called ``name``; ValueError for an unknown one."""
    f = FAMILIES.get(name)
    if f is None:
        raise ValueError(f"unknown tool-call family {name!r}; expected one of {NAMES}")
    return f


__all__ = ["FAMILIES", "NAMES", "ToolFamily", "family"]
