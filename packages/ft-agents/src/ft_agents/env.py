"""The harness's environment: the user's, minus cloud model credentials and variables that would send
the harness somewhere other than the chosen server, plus the launch's own settings."""

from __future__ import annotations

import re
from collections.abc import Mapping

# Credentials of hosted model APIs. A harness that finds one may use it (Claude Code prefers
# ANTHROPIC_API_KEY over a custom token; Codex, OpenCode and OpenClaw pick providers by key).
SECRETS = frozenset(
    {
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "OPENAI_API_KEY",
        "OPENAI_ORG_ID",
        "OPENAI_ORGANIZATION",
        "OPENAI_PROJECT_ID",
        "CODEX_API_KEY",
        "AZURE_OPENAI_API_KEY",
        "AZURE_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_GENERATIVE_AI_API_KEY",
        "VERTEX_API_KEY",
        "GROQ_API_KEY",
        "MISTRAL_API_KEY",
        "DEEPSEEK_API_KEY",
        "OPENROUTER_API_KEY",
        "XAI_API_KEY",
        "TOGETHER_API_KEY",
        "TOGETHER_AI_API_KEY",
        "FIREWORKS_API_KEY",
        "COHERE_API_KEY",
        "CO_API_KEY",
        "PERPLEXITY_API_KEY",
        "CEREBRAS_API_KEY",
        "MOONSHOT_API_KEY",
        "DASHSCOPE_API_KEY",
        "ZAI_API_KEY",
        "ZHIPU_API_KEY",
        "MINIMAX_API_KEY",
        "NVIDIA_API_KEY",
        "OPENCODE_API_KEY",
        "AWS_BEARER_TOKEN_BEDROCK",
    }
)
# Any other key or token of these providers (names ending in API_KEY or _TOKEN, e.g. GOOGLE_GENAI_API_KEY).
_SECRET_RE = re.compile(
    r"^(ANTHROPIC|CLAUDE|OPENAI|AZURE_OPENAI|GEMINI|GOOGLE_GENAI|GROQ|MISTRAL|DEEPSEEK|OPENROUTER|"
    r"XAI|TOGETHER|FIREWORKS|COHERE|PERPLEXITY|CEREBRAS|MOONSHOT|DASHSCOPE|ZAI|ZHIPU|MINIMAX)"
    r"_(\w*_)?(API_KEY|TOKEN)$"
)
# Routing and config overrides that would point a harness at another endpoint or config.
ROUTING = frozenset(
    {
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_BEDROCK_BASE_URL",
        "ANTHROPIC_VERTEX_BASE_URL",
        "ANTHROPIC_FOUNDRY_BASE_URL",
        "ANTHROPIC_VERTEX_PROJECT_ID",
        "CLAUDE_CODE_USE_BEDROCK",
        "CLAUDE_CODE_USE_VERTEX",
        "CLAUDE_CODE_USE_FOUNDRY",
        "CLAUDE_CONFIG_DIR",
        "OPENAI_BASE_URL",
        "OPENAI_API_BASE",
        "CODEX_HOME",
        "OPENCODE_CONFIG",
        "OPENCODE_CONFIG_CONTENT",
        "OPENCODE_CONFIG_DIR",
        "OPENCLAW_CONFIG_PATH",
        "OPENCLAW_STATE_DIR",
        "OPENCLAW_PROFILE",
    }
)


def removed_names(environ: Mapping[str, str]) -> list[str]:
    """Names (never values) of the variables the harness will not see."""
    return sorted(k for k in environ if k in SECRETS or k in ROUTING or _SECRET_RE.match(k))


def child_env(
    environ: Mapping[str, str], settings: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """(the harness's environment, the names removed). ``settings`` are set last, so they always win."""
    removed = removed_names(environ)
    env = {k: v for k, v in environ.items() if k not in set(removed)}
    env.update(settings)
    return env, removed
