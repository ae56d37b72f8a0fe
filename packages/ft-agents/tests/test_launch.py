"""``ft-agents launch`` end to end with a fake server and fake harness executables: what the harness
receives, --dry-run, the messages and exit status when something is missing, and ``ft serve`` started
for --model and stopped afterwards."""

import json
import os
import re
import socket
from pathlib import Path

import pytest
from fakes import FakeServer, make_fake_harness, run_agents


def _env(tmp_path, name, **extra):
    bin_dir = tmp_path / "bin"
    make_fake_harness(bin_dir, name)
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_HARNESS_OUT": str(tmp_path / "ran.json"),
        **extra,
    }


def _ran(tmp_path) -> dict:
    return json.loads((tmp_path / "ran.json").read_text())


def test_launch_runs_the_harness_with_private_config_and_scrubbed_env(
    agents_env, fake_server, tmp_path
):
    work = tmp_path / "work"
    work.mkdir()
    env = _env(
        tmp_path,
        "claude",
        ANTHROPIC_API_KEY="sk-ant-cloud",
        OPENAI_API_KEY="sk-openai-cloud",
        ANTHROPIC_BASE_URL="https://api.anthropic.com",
    )
    r = run_agents(
        "launch",
        "claude",
        "--server",
        fake_server.url + "/v1/",
        "--",
        "-p",
        "say hi",
        env=env,
        cwd=work,
    )
    assert r.returncode == 0, r.stderr
    assert "fake harness ran" in r.stdout
    ran = _ran(tmp_path)
    assert ran["argv"][1:] == ["-p", "say hi"] and Path(ran["cwd"]) == work
    e = ran["env"]
    assert "ANTHROPIC_API_KEY" not in e and "OPENAI_API_KEY" not in e
    assert e["ANTHROPIC_BASE_URL"] == fake_server.url  # --server's /v1/ is normalised away
    assert e["ANTHROPIC_MODEL"] == "m1"
    assert (
        e["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "65536"
        and e["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "16384"
    )
    home = Path(e["CLAUDE_CONFIG_DIR"])
    assert home.is_relative_to(agents_env / "agents-state" / "launches")
    state = json.loads((home / ".claude.json").read_text())
    assert state["projects"][str(work)]["hasTrustDialogAccepted"] is True
    assert (home / ".claude.json").stat().st_mode & 0o077 == 0
    assert (
        "removed from its environment: ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, OPENAI_API_KEY"
        in r.stderr
    )
    assert "sk-ant-cloud" not in r.stderr + r.stdout
    assert [p for p, _ in fake_server.requests] == ["/v1/models"]


def test_exit_status_of_the_harness_is_returned(agents_env, fake_server, tmp_path):
    env = _env(tmp_path, "codex", FAKE_HARNESS_RC="3", FT_SERVER_URL=fake_server.url)
    r = run_agents("launch", "codex", "--", "exec", "hi", env=env)
    assert r.returncode == 3
    ran = _ran(tmp_path)
    assert (
        Path(ran["env"]["CODEX_HOME"]) / "config.toml"
    ).is_file()  # $FT_SERVER_URL found the server


def test_limits_from_flags_and_from_servers_that_say_less(agents_env, tmp_path):
    env = _env(tmp_path, "opencode")
    with FakeServer([{"id": "vllm-model", "max_model_len": 8192}, {"id": "other"}]) as srv:
        run_agents("launch", "opencode", "--server", srv.url, "--max-output-tokens", "100", env=env)
        cfg = json.loads(Path(_ran(tmp_path)["env"]["OPENCODE_CONFIG"]).read_text())
        assert cfg["provider"]["ft"]["models"]["vllm-model"]["limit"] == {
            "context": 8192,
            "output": 100,
        }
        r = run_agents(
            "launch", "opencode", "--server", srv.url, "--model-id", "other", "--dry-run", env=env
        )
        assert "model:   other, context 32768 tokens (not reported by the server)" in r.stdout
        r = run_agents("launch", "opencode", "--server", srv.url, "--model-id", "nope", env=env)
        assert (
            r.returncode == 2
            and "does not serve a model 'nope'; it serves vllm-model, other" in r.stderr
        )
        r = run_agents(
            "launch",
            "opencode",
            "--server",
            srv.url,
            "--model-id",
            "other",
            "--context-length",
            "20000",
            "--dry-run",
            env=env,
        )
        assert "context 20000 tokens, output limit 5000" in r.stdout


def test_dry_run_prints_env_files_and_command_and_creates_nothing(
    agents_env, fake_server, tmp_path
):
    env = _env(tmp_path, "openclaw", ANTHROPIC_API_KEY="sk-ant-cloud")
    r = run_agents(
        "launch",
        "openclaw",
        "--server",
        fake_server.url,
        "--api-key",
        "sk-local-secret",
        "--dry-run",
        "--",
        "agent",
        "exec",
        "hi",
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"server:  {fake_server.url} (--server)" in out
    assert "OPENCLAW_CONFIG_PATH=" in out and "FT_AGENTS_API_KEY=***" in out
    assert "sk-local-secret" not in out and "sk-ant-cloud" not in out
    assert "environment removed: ANTHROPIC_API_KEY" in out
    assert '"api": "openai-completions"' in out and '"contextWindow": 65536' in out
    assert "command: " in out and "agent exec hi --json --config" in out
    sessions = agents_env / "agents-state" / "sessions" / "openclaw"
    assert f"sessions: {sessions} (kept across launches)" in out
    assert re.search(
        rf"^link \S+/openclaw/state/agents -> {re.escape(str(sessions))}/agents$", out, re.M
    )
    assert not (agents_env / "agents-state").exists()
    assert fake_server.requests[0][1]["Authorization"] == "Bearer sk-local-secret"


def test_sessions_written_in_one_launch_are_seen_by_the_next(agents_env, fake_server, tmp_path):
    env = _env(tmp_path, "claude")
    homes = []
    for _ in range(2):
        r = run_agents("launch", "claude", "--server", fake_server.url, "--", "-c", env=env)
        assert r.returncode == 0, r.stderr
        homes.append(Path(_ran(tmp_path)["env"]["CLAUDE_CONFIG_DIR"]))
        if len(homes) == 1:
            (homes[0] / "projects" / "-work").mkdir()
            (homes[0] / "projects" / "-work" / "s1.jsonl").write_text("turn 1\n")
    assert homes[0] != homes[1]  # each launch its own config ...
    assert (
        homes[1] / "projects" / "-work" / "s1.jsonl"
    ).read_text() == "turn 1\n"  # ... one session store
    store = agents_env / "agents-state" / "sessions" / "claude"
    assert (homes[1] / "projects").resolve() == store / "projects"
    assert f"sessions in {store}" in r.stderr


def test_dry_run_without_the_harness_says_so(agents_env, fake_server):
    r = run_agents(
        "launch",
        "codex",
        "--server",
        fake_server.url,
        "--dry-run",
        env={"PATH": str(agents_env / "no")},
    )
    assert r.returncode == 0 and "<codex: not installed; add --install>" in r.stdout


def test_missing_harness_is_a_clear_error(agents_env, fake_server):
    r = run_agents(
        "launch", "codex", "--server", fake_server.url, env={"PATH": str(agents_env / "no")}
    )
    assert r.returncode == 2
    assert (
        "Codex (`codex`) is not installed" in r.stderr
        and "ft-agents launch codex --install" in r.stderr
    )
    assert "Traceback" not in r.stderr
    assert not fake_server.requests  # the harness is checked before the server is asked


def test_unreachable_server_is_a_clear_error(agents_env, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the with-block ends: nothing listens there
    env = _env(tmp_path, "claude")
    r = run_agents("launch", "claude", "--server", f"127.0.0.1:{port}", "--", "-p", "hi", env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert (
        f"no server answers at http://127.0.0.1:{port} (--server:" in r.stderr
        and "--model PATH" in r.stderr
    )
    r = run_agents(
        "launch", "claude", "--dry-run", env=env
    )  # default: $FT_SERVER_URL (a dead port here)
    assert (
        r.returncode == 2 and "no server answers at http://127.0.0.1:9 ($FT_SERVER_URL" in r.stderr
    )
    assert not (tmp_path / "ran.json").exists()


def test_server_wanting_a_key(agents_env, tmp_path):
    env = _env(tmp_path, "claude")
    with FakeServer(api_key="k1") as srv:
        r = run_agents("launch", "claude", "--server", srv.url, env=env)
        assert (
            r.returncode == 2
            and "needs an API key: pass --api-key KEY or set $FT_API_KEY" in r.stderr
        )
        r = run_agents(
            "launch",
            "claude",
            "--server",
            srv.url,
            "--",
            "-p",
            "x",
            env={**env, "FT_API_KEY": "k1"},
        )
        assert r.returncode == 0 and _ran(tmp_path)["env"]["ANTHROPIC_AUTH_TOKEN"] == "k1"


def test_arguments_after_dashdash_are_for_launch_only(agents_env):
    r = run_agents("doctor", "--", "x")
    assert r.returncode == 2 and "for `launch` only" in r.stderr


@pytest.mark.slow
def test_model_starts_ft_serve_and_stops_it_when_the_harness_exits(agents_env, tmp_path):
    from ft_core.demo import demo_model_path

    env = _env(tmp_path, "opencode", FT_CACHE_DIR=str(tmp_path / "ft-cache"))
    model = demo_model_path()  # FT_CACHE_DIR is read per call: this is the user's cache (made once)
    r = run_agents(
        "launch",
        "opencode",
        "--model",
        str(model),
        "--serve-args=--served-model-name demo-x",
        "--",
        "run",
        "hi",
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "ft-agents: starting `ft serve --model" in r.stderr
    ran = _ran(tmp_path)
    cfg = json.loads(Path(ran["env"]["OPENCODE_CONFIG"]).read_text())
    base = cfg["provider"]["ft"]["options"]["baseURL"]
    assert "demo-x" in cfg["provider"]["ft"]["models"] and base.startswith("http://127.0.0.1:")
    host, port = base.removeprefix("http://").removesuffix("/v1").split(":")
    with pytest.raises(OSError):  # stopped when the harness exited
        socket.create_connection((host, int(port)), timeout=2).close()
    log = Path(ran["env"]["OPENCODE_CONFIG"]).parents[1] / "ft-serve.log"
    assert "ready at" in log.read_text()


def test_ft_launch_is_ft_agents_launch(agents_env, fake_server, tmp_path):
    import subprocess
    import sys

    env = {**os.environ, **_env(tmp_path, "claude")}
    ft = [sys.executable, "-m", "ft_serve.cli", "launch"]
    r = subprocess.run(
        [*ft, "claude", "--server", fake_server.url, "--", "-p", "hi"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert _ran(tmp_path)["argv"][1:] == ["-p", "hi"]
    r = subprocess.run(
        [*ft, "codex", "--server", fake_server.url],
        env={**env, "PATH": str(tmp_path / "no")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "Codex (`codex`) is not installed" in r.stderr
