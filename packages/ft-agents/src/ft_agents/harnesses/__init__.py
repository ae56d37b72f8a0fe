"""The harness adapters, one file each, by launch name."""

from __future__ import annotations

from ft_agents.errors import AgentsError
from ft_agents.harnesses.base import Harness, Plan, Setup, default_output_limit
from ft_agents.harnesses.claude import ClaudeCode
from ft_agents.harnesses.codex import Codex
from ft_agents.harnesses.openclaw import OpenClaw
from ft_agents.harnesses.opencode import OpenCode

HARNESSES: dict[str, Harness] = {h.name: h for h in (ClaudeCode(), Codex(), OpenCode(), OpenClaw())}
ALIASES = {
    "claude-code": "claude",
    "claude_code": "claude",
    "open-code": "opencode",
    "open-claw": "openclaw",
}


def get(name: str) -> Harness:
    h = HARNESSES.get(ALIASES.get(name.lower(), name.lower()))
    if h is None:
        raise AgentsError(f"unknown harness {name!r}; one of: {', '.join(HARNESSES)}")
    return h


__all__ = ["HARNESSES", "AgentsError", "Harness", "Plan", "Setup", "default_output_limit", "get"]
