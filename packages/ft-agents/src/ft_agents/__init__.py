"""ft-agents: launch coding agents (Claude Code, Codex, OpenCode, OpenClaw) on an ft server, or on any
OpenAI/Anthropic-compatible endpoint, with a private configuration per launch.

It talks to servers over HTTP only and never imports the engine packages (DESIGN §1)."""

__version__ = "0.1.0"

from ft_agents.errors import AgentsError  # noqa: E402

__all__ = ["AgentsError", "__version__"]
