"""Claude Code: Anthropic Messages (``/v1/messages?beta=true``), configured by environment variables and a
private ``CLAUDE_CONFIG_DIR`` whose ``.claude.json`` marks onboarding done and the launch folder trusted."""

from __future__ import annotations

import json

from ft_agents.harnesses.base import REQUEST_TIMEOUT_S, Harness, Plan, Setup


class ClaudeCode(Harness):
    name, title, package, endpoint = (
        "claude",
        "Claude Code",
        "@anthropic-ai/claude-code",
        "/v1/messages",
    )
    # projects/<cwd>/<session>.jsonl is what --continue and --resume read; the others are kept per session id.
    session_paths = ("projects", "file-history", "todos", "plans")

    def plan(self, s: Setup, args: list[str]) -> Plan:
        home, m = s.config_dir / "claude", s.model
        env = {
            "CLAUDE_CONFIG_DIR": str(home),
            "ANTHROPIC_BASE_URL": s.server.url,  # the client appends /v1/messages
            "ANTHROPIC_AUTH_TOKEN": s.api_key,
            "ANTHROPIC_MODEL": m,
            "ANTHROPIC_SMALL_FAST_MODEL": m,
            "CLAUDE_CODE_SUBAGENT_MODEL": m,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": m,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": m,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": m,
            "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(
                s.context
            ),  # the window of a model it does not know
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(s.output_limit),
            "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",  # no per-conversation system block: keeps prefix reuse
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no telemetry, error reports, update checks
            "DISABLE_AUTOUPDATER": "1",
            "API_TIMEOUT_MS": str(REQUEST_TIMEOUT_S * 1000),
        }
        state = {
            "hasCompletedOnboarding": True,
            "theme": "dark",
            "autoUpdates": False,
            "projects": {
                str(s.cwd): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}
            },
        }
        return Plan(
            env,
            {home / ".claude.json": json.dumps(state, indent=2) + "\n"},
            self.args_or_default(args),
            links=self.session_links(home, s),
        )
