"""OpenClaw: Chat Completions (``api: "openai-completions"``) from a custom provider in a private config
named by ``OPENCLAW_CONFIG_PATH``, with its state in the launch folder too. Needs Node >= 24.16."""

from __future__ import annotations

import json

from ft_agents.harnesses.base import KEY_ENV, REQUEST_TIMEOUT_S, Harness, Plan, Setup


class OpenClaw(Harness):
    name, title, package, endpoint = "openclaw", "OpenClaw", "openclaw", "/v1/chat/completions"
    node_min = (24, 16)
    default_args = ("chat",)  # the local terminal UI
    # Under its state dir: the sessions and the session index (sqlite), and the agent's workspace (its identity
    # and memory notes); `agent exec` keeps nothing (an isolated run).
    session_paths = ("agents", "state", "workspace")

    def plan(self, s: Setup, args: list[str]) -> Plan:
        path = s.config_dir / "openclaw" / "openclaw.json"
        model = {
            "id": s.model,
            "name": s.model,
            "reasoning": False,
            "input": ["text"],
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
            "contextWindow": s.context,
            "maxTokens": s.output_limit,
        }
        cfg = {
            "agents": {"defaults": {"model": {"primary": f"ft/{s.model}"}}},
            "models": {
                "mode": "replace",
                "providers": {
                    "ft": {
                        "baseUrl": s.server.openai_url,
                        "apiKey": f"${{{KEY_ENV}}}",
                        "api": "openai-completions",
                        "timeoutSeconds": REQUEST_TIMEOUT_S,
                        "models": [model],
                    }
                },
            },
            "update": {"checkOnStart": False},
        }
        state = s.config_dir / "openclaw" / "state"
        env = {
            "OPENCLAW_CONFIG_PATH": str(path),
            "OPENCLAW_STATE_DIR": str(state),
            "OPENCLAW_NO_AUTO_UPDATE": "1",
            KEY_ENV: s.api_key,
        }
        args = self.args_or_default(args)
        if args[:2] == ["agent", "exec"] and not {"--config", "--isolated"} & set(args):
            args += [
                "--config",
                str(path),
            ]  # pin the run to this config, as the headless docs advise
        return Plan(
            env, {path: json.dumps(cfg, indent=2) + "\n"}, args, links=self.session_links(state, s)
        )
