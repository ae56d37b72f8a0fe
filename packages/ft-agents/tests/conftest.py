"""Fixtures of the ft-agents tests: a fake OpenAI-style server, fake harness executables, and (for the
end-to-end tests) ``ft serve`` on a long-context copy of the demo model."""

import sys
from pathlib import Path

import pytest

# The helpers beside this file are plain modules (pytest runs with --import-mode=importlib).
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakes import FakeServer  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "e2e: runs a real harness CLI from npm against `ft serve` (fails in CI when "
        "the harness is missing, skips locally)",
    )


@pytest.fixture
def fake_server():
    with FakeServer() as s:
        yield s


@pytest.fixture
def agents_env(tmp_path, monkeypatch):
    """ft-agents' own folders in tmp, no server at the default address, no cloud keys from the caller."""
    monkeypatch.setenv("FT_AGENTS_HOME", str(tmp_path / "agents-home"))
    monkeypatch.setenv("FT_AGENTS_STATE_DIR", str(tmp_path / "agents-state"))
    monkeypatch.setenv("FT_SERVER_URL", "http://127.0.0.1:9")  # discard port: nothing answers
    for k in ("FT_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(k, raising=False)
    return tmp_path
