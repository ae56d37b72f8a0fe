"""The harness's environment loses cloud credentials and routing overrides, keeps everything else, and
the launch's own settings win."""

from ft_agents.env import child_env, removed_names


def test_cloud_keys_and_routing_are_removed_the_rest_kept():
    user = {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "GITHUB_TOKEN": "gh",
        "AWS_PROFILE": "dev",
        "TERM": "xterm",
        "ANTHROPIC_API_KEY": "sk-ant",
        "OPENAI_API_KEY": "sk-oai",
        "GEMINI_API_KEY": "g",
        "OPENROUTER_API_KEY": "o",
        "CLAUDE_CODE_OAUTH_TOKEN": "t",
        "AWS_BEARER_TOKEN_BEDROCK": "b",
        "GOOGLE_GENAI_API_KEY": "x",
        "OPENAI_BASE_URL": "https://api.openai.com/v1",
        "CLAUDE_CODE_USE_BEDROCK": "1",
        "OPENCODE_CONFIG_CONTENT": "{}",
        "CODEX_HOME": "/home/u/.codex",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "9000",
    }
    env, removed = child_env(
        user, {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8000", "CODEX_HOME": "/launch/codex"}
    )
    for k in (
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "GEMINI_API_KEY",
        "OPENROUTER_API_KEY",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "AWS_BEARER_TOKEN_BEDROCK",
        "GOOGLE_GENAI_API_KEY",
        "OPENAI_BASE_URL",
        "CLAUDE_CODE_USE_BEDROCK",
        "OPENCODE_CONFIG_CONTENT",
    ):
        assert k not in env and k in removed
    for k in (
        "PATH",
        "HOME",
        "GITHUB_TOKEN",
        "AWS_PROFILE",
        "TERM",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS",
    ):
        assert env[k] == user[k] and k not in removed
    assert (
        env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8000"
        and env["CODEX_HOME"] == "/launch/codex"
    )
    assert removed == sorted(removed) and removed == removed_names(user)
