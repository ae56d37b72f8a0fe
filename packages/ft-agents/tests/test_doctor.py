"""``ft-agents doctor``: one line per check, a fix for each failure, exit 1 when anything needs fixing."""

import shutil

from fakes import FakeServer, make_fake_harness, run_agents


def test_doctor_reports_harnesses_server_and_context(agents_env, tmp_path):
    bin_dir = tmp_path / "bin"
    for name in ("claude", "codex", "opencode"):
        make_fake_harness(bin_dir, name)
    if node := shutil.which(
        "node"
    ):  # only node and the fakes on PATH: a globally installed harness stays unseen
        (bin_dir / "node").symlink_to(node)
    env = {"PATH": str(bin_dir), "FAKE_HARNESS_OUT": str(tmp_path / "ran.json")}
    with FakeServer([{"id": "small", "context_length": 20000}]) as srv:
        r = run_agents("doctor", "--server", srv.url, env=env)
    out = r.stdout
    assert r.returncode == 1, out
    assert "[  ok] Claude Code: fake harness ran at" in out  # `claude --version`'s first line
    assert "[FAIL] OpenClaw: not installed\n       fix: ft-agents install openclaw" in out
    assert f"[  ok] server {srv.url} (--server): model small, context 20000" in out
    assert (
        "[FAIL] Claude Code needs ~32768 tokens of context" in out
        and "--max-model-len 32768" in out
    )
    with FakeServer([{"id": "big", "max_model_len": 65536}]) as srv:
        out = run_agents("doctor", "--server", srv.url, env=env).stdout
    assert "[  ok] OpenCode: context 65536 >= 32768; it calls /v1/chat/completions" in out
    assert "[  ok] Codex: context 65536 >= 32768; it calls /v1/responses" in out


def test_doctor_without_a_server(agents_env):
    r = run_agents("doctor", env={"PATH": str(agents_env / "no")})
    assert r.returncode == 1
    assert (
        "[FAIL] server http://127.0.0.1:9 ($FT_SERVER_URL)" in r.stdout
        and "ft serve --model PATH" in r.stdout
    )
