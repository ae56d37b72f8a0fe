"""OpenCode: Chat Completions through an ``@ai-sdk/openai-compatible`` provider, in a private config file
named by ``OPENCODE_CONFIG``; the key is read from the environment (``{env:...}``), never written.
Its sessions live in its own data folder (``$XDG_DATA_HOME/opencode/opencode.db``), which the launch leaves
alone, so ``--continue`` already spans launches: no session links."""

from __future__ import annotations

import json

from ft_agents.harnesses.base import KEY_ENV, REQUEST_TIMEOUT_S, Harness, Plan, Setup


class OpenCode(Harness):
    name, title, package, endpoint = "opencode", "OpenCode", "opencode-ai", "/v1/chat/completions"

    def plan(self, s: Setup, args: list[str]) -> Plan:
        path, ref = s.config_dir / "opencode" / "opencode.json", f"ft/{s.model}"
        model = {
            "name": s.model,
            "tool_call": True,
            "reasoning": True,
            "limit": {"context": s.context, "output": s.output_limit},
        }
        cfg = {
            "$schema": "https://opencode.ai/config.json",
            "model": ref,
            "small_model": ref,
            "enabled_providers": ["ft"],
            "autoupdate": False,
            "share": "disabled",
            "provider": {
                "ft": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": f"ft at {s.server.url}",
                    "options": {
                        "baseURL": s.server.openai_url,
                        "apiKey": f"{{env:{KEY_ENV}}}",
                        "timeout": REQUEST_TIMEOUT_S * 1000,
                    },
                    "models": {s.model: model},
                }
            },
        }
        env = {
            "OPENCODE_CONFIG": str(path),
            KEY_ENV: s.api_key,
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
        }
        return Plan(env, {path: json.dumps(cfg, indent=2) + "\n"}, self.args_or_default(args))
