"""Each harness's plan: the keys its CLI reads, the server's URL, model, context and output limit, and
no API key in any file."""

import json
import tomllib
from pathlib import Path

import pytest

from ft_agents import harnesses
from ft_agents.harnesses import Setup, default_output_limit
from ft_agents.harnesses.base import KEY_ENV
from ft_agents.server import ServerInfo

KEY = "sk-very-secret-123"


def _setup(tmp_path, ctx=65536, out=4096, url="http://10.0.0.5:8001") -> Setup:
    return Setup(
        ServerInfo(url, "qwen3-30b", ctx),
        tmp_path / "launch",
        tmp_path / "work",
        KEY,
        out,
        tmp_path / "sessions",
    )


@pytest.mark.parametrize("name", list(harnesses.HARNESSES))
def test_files_live_in_the_launch_folder_and_never_hold_the_key(tmp_path, name):
    s = _setup(tmp_path)
    plan = harnesses.get(name).plan(s, [])
    assert plan.files
    for path, text in plan.files.items():
        assert Path(path).is_relative_to(s.config_dir)
        assert KEY not in text
    assert KEY in plan.env.values()  # the key travels by environment only
    assert all(isinstance(v, str) for v in plan.env.values())


def test_claude_code(tmp_path):
    s = _setup(tmp_path)
    plan = harnesses.get("claude").plan(s, ["-p", "hi"])
    e = plan.env
    assert e["ANTHROPIC_BASE_URL"] == "http://10.0.0.5:8001"  # no /v1: the client adds /v1/messages
    assert e["ANTHROPIC_AUTH_TOKEN"] == KEY
    for k in (
        "ANTHROPIC_MODEL",
        "ANTHROPIC_DEFAULT_OPUS_MODEL",
        "ANTHROPIC_DEFAULT_SONNET_MODEL",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL",
        "CLAUDE_CODE_SUBAGENT_MODEL",
    ):
        assert e[k] == "qwen3-30b"
    assert (
        e["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "65536"
        and e["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "4096"
    )
    assert (
        e["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"
        and e["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    )
    home = Path(e["CLAUDE_CONFIG_DIR"])
    state = json.loads(plan.files[home / ".claude.json"])
    assert state["hasCompletedOnboarding"] is True
    assert state["projects"][str(s.cwd)]["hasTrustDialogAccepted"] is True
    assert plan.args == ["-p", "hi"]


def test_codex(tmp_path):
    s = _setup(tmp_path)
    plan = harnesses.get("codex").plan(s, ["exec", "--skip-git-repo-check", "hi"])
    home = Path(plan.env["CODEX_HOME"])
    cfg = tomllib.loads(plan.files[home / "config.toml"])
    assert cfg["model"] == "qwen3-30b" and cfg["model_provider"] == "ft"
    assert cfg["model_context_window"] == 65536
    assert 65536 // 2 <= cfg["model_auto_compact_token_limit"] < 65536
    p = cfg["model_providers"]["ft"]
    assert p["base_url"] == "http://10.0.0.5:8001/v1" and p["wire_api"] == "responses"
    assert plan.env[p["env_key"]] == KEY
    assert cfg["projects"][str(s.cwd)]["trust_level"] == "trusted"
    assert cfg["check_for_update_on_startup"] is False
    assert any(
        "output" in n for n in plan.notes
    )  # Codex has no output-limit setting: said, not hidden
    assert plan.args == [
        "--no-daemon",
        "exec",
        "--skip-git-repo-check",
        "hi",
    ]  # no daemon outliving the launch
    assert harnesses.get("codex").plan(s, []).args == ["--no-daemon"]
    assert harnesses.get("codex").plan(s, ["queue", "x"]).args == ["queue", "x"]


def test_codex_toml_quotes_odd_names(tmp_path):
    s = Setup(
        ServerInfo("http://h:1", 'org/model "x"\\v2', 8192),
        tmp_path / "l",
        tmp_path / 'we"ird dir',
        KEY,
        512,
        tmp_path / "s",
    )
    plan = harnesses.get("codex").plan(s, [])
    cfg = tomllib.loads(next(iter(plan.files.values())))
    assert cfg["model"] == 'org/model "x"\\v2' and str(s.cwd) in cfg["projects"]


def test_opencode(tmp_path):
    s = _setup(tmp_path)
    plan = harnesses.get("opencode").plan(s, ["run", "hi"])
    cfg = json.loads(plan.files[Path(plan.env["OPENCODE_CONFIG"])])
    prov = cfg["provider"]["ft"]
    assert prov["npm"] == "@ai-sdk/openai-compatible"
    assert prov["options"]["baseURL"] == "http://10.0.0.5:8001/v1"
    assert prov["options"]["apiKey"] == f"{{env:{KEY_ENV}}}" and plan.env[KEY_ENV] == KEY
    m = prov["models"]["qwen3-30b"]
    assert (
        m["limit"] == {"context": 65536, "output": 4096}
        and m["tool_call"] is True
        and "reasoning" in m
    )
    assert cfg["model"] == "ft/qwen3-30b" and cfg["small_model"] == "ft/qwen3-30b"
    assert cfg["autoupdate"] is False and cfg["share"] == "disabled"


def test_openclaw(tmp_path):
    s = _setup(tmp_path)
    h = harnesses.get("openclaw")
    plan = h.plan(s, ["agent", "exec", "hi", "--json"])
    path = Path(plan.env["OPENCLAW_CONFIG_PATH"])
    cfg = json.loads(plan.files[path])
    prov = cfg["models"]["providers"]["ft"]
    assert prov["baseUrl"] == "http://10.0.0.5:8001/v1" and prov["api"] == "openai-completions"
    assert prov["apiKey"] == f"${{{KEY_ENV}}}"
    (m,) = prov["models"]
    assert m["id"] == "qwen3-30b" and m["contextWindow"] == 65536 and m["maxTokens"] == 4096
    assert set(m["cost"].values()) == {0}
    assert cfg["agents"]["defaults"]["model"]["primary"] == "ft/qwen3-30b"
    assert plan.args == [
        "agent",
        "exec",
        "hi",
        "--json",
        "--config",
        str(path),
    ]  # the headless run is pinned
    assert Path(plan.env["OPENCLAW_STATE_DIR"]).is_relative_to(s.config_dir)
    assert h.plan(s, ["agent", "exec", "hi", "--config", "mine.json"]).args[-1] == "mine.json"
    assert h.plan(s, []).args == ["chat"]
    assert h.node_min == (24, 16)


@pytest.mark.parametrize(
    "ctx,out", [(4096, 1024), (65536, 16384), (2048, 512), (1000, 256), (1 << 20, 32000)]
)
def test_output_limit_follows_the_context(ctx, out):
    assert default_output_limit(ctx) == out


def test_unknown_harness_names_the_choices():
    with pytest.raises(harnesses.AgentsError, match="claude, codex, opencode, openclaw"):
        harnesses.get("cursor")
    assert harnesses.get("Claude-Code").name == "claude"


@pytest.mark.parametrize(
    "name, home_env, kept",
    [
        ("codex", "CODEX_HOME", {"sessions", "archived_sessions"}),
        ("claude", "CLAUDE_CONFIG_DIR", {"projects", "file-history", "todos", "plans"}),
        ("openclaw", "OPENCLAW_STATE_DIR", {"agents", "state", "workspace"}),
    ],
)
def test_session_folders_of_the_home_link_to_the_kept_store(tmp_path, name, home_env, kept):
    s = _setup(tmp_path)
    plan = harnesses.get(name).plan(s, [])
    home = Path(plan.env[home_env])
    assert home.is_relative_to(s.config_dir)
    assert plan.links == {home / p: s.sessions_dir / p for p in kept}
    assert not set(plan.links) & set(plan.files)


def test_opencode_keeps_sessions_in_its_own_data_folder(tmp_path):
    plan = harnesses.get("opencode").plan(_setup(tmp_path), [])
    assert not plan.links and not {"XDG_DATA_HOME", "OPENCODE_DATA_DIR"} & set(plan.env)
