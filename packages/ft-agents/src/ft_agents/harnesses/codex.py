"""Codex: OpenAI Responses only (``wire_api = "chat"`` is rejected), configured by a ``config.toml`` in a
private ``CODEX_HOME``; the key travels in an environment variable named by ``env_key``.

Reasoning needs no key: Codex 0.171 asks every model, its fallback metadata for an unknown id included, for
``reasoning`` (``summary: "auto"``, no effort) with ``include: ["reasoning.encrypted_content"]``, and sends
the reasoning items back in later turns (tests/harnesses/test_e2e_harnesses.py). The older
``model_supports_reasoning_summaries`` is gone (``--strict-config`` rejects it); a model that does not
reason simply returns no reasoning items. ``model_reasoning_effort`` is left to the user (``-c``): without
it the chat template's default applies."""

from __future__ import annotations

import json

from ft_agents.harnesses.base import KEY_ENV, REQUEST_TIMEOUT_S, Harness, Plan, Setup


_DAEMON_BOUND = {"queue", "remote-control"}  # subcommands that refuse --no-daemon


def _s(v: str) -> str:
    return json.dumps(v)  # a JSON string is a valid TOML basic string


class Codex(Harness):
    name, title, package, endpoint = "codex", "Codex", "@openai/codex", "/v1/responses"
    # Rollout files (the conversations); the sqlite state db is rebuilt from them by each launch, so that
    # `resume --last` and the picker see earlier launches' sessions (its paths point into this launch).
    session_paths = ("sessions", "archived_sessions")

    def plan(self, s: Setup, args: list[str]) -> Plan:
        home = s.config_dir / "codex"
        compact = max(
            s.context // 2, s.context - s.output_limit
        )  # compact while a full reply still fits
        toml = "\n".join(
            [
                "# Written by ft-agents for one launch; your own ~/.codex is not read.",
                f"model = {_s(s.model)}",
                'model_provider = "ft"',
                f"model_context_window = {s.context}",
                f"model_auto_compact_token_limit = {compact}",
                "check_for_update_on_startup = false",
                "",
                "[model_providers.ft]",
                f"name = {_s('ft at ' + s.server.url)}",
                f"base_url = {_s(s.server.openai_url)}",
                f"env_key = {_s(KEY_ENV)}",
                'wire_api = "responses"',
                f"stream_idle_timeout_ms = {REQUEST_TIMEOUT_S * 1000}",
                "",
                f"[projects.{_s(str(s.cwd))}]",
                'trust_level = "trusted"',
                "",
            ]
        )
        env = {"CODEX_HOME": str(home), KEY_ENV: s.api_key}
        notes = [
            f"Codex has no output-token setting; the server bounds each reply (context {s.context})."
        ]
        args = self.args_or_default(args)
        if not ({"--no-daemon", "--remote"} & set(args) or args[:1] and args[0] in _DAEMON_BOUND):
            # The TUI otherwise starts a shared app-server daemon tied to this launch's CODEX_HOME,
            # which outlives the session.
            args = ["--no-daemon", *args]
        return Plan(env, {home / "config.toml": toml}, args, notes, self.session_links(home, s))
