"""``ft-agents install`` with the real npm: when npm skips a package's install scripts (simulated with
npm_config_ignore_scripts, which is what npm 11 does to Claude Code and OpenCode), the harness is
still left working, and a second install is a no-op. Uses the npm cache that .ci/run fills."""

import os
import shutil
import time

import pytest
from fakes import run_agents

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_install_runs_the_scripts_npm_skipped(tmp_path):
    if not shutil.which("npm"):
        if os.environ.get("CI"):
            pytest.fail("CI needs npm (Node.js) for the harness tests")
        pytest.skip("npm is not installed")
    env = {"FT_AGENTS_HOME": str(tmp_path / "home"), "npm_config_ignore_scripts": "true"}
    r = run_agents("install", "opencode", env=env, timeout=900)
    assert r.returncode == 0, r.stderr
    assert "running opencode-ai's postinstall script" in r.stderr
    assert "ft-agents: OpenCode 1." in r.stderr
    t = time.monotonic()
    again = run_agents("install", "opencode", env=env, timeout=300)
    assert again.returncode == 0 and "npm install" not in again.stderr and time.monotonic() - t < 60
