"""Fixtures of the ft-serve tests: the demo model served on loopback."""

import sys
from pathlib import Path

import pytest

# The helpers beside this file (serve_helpers.py) and the workspace tests' (tiny_checkpoints.py,
# tiny_tokenizers.py) are plain modules (pytest runs with --import-mode=importlib), for the tests of
# every subfolder.
_HERE = Path(__file__).resolve().parent
for _helpers in (str(_HERE.parents[2] / "tests"), str(_HERE)):
    if _helpers not in sys.path:
        sys.path.insert(0, _helpers)

from ft_core import Engine  # noqa: E402
from serve_helpers import API_KEY, start_server  # noqa: E402


@pytest.fixture(scope="session")
def demo_engine():
    return Engine.from_pretrained(None)


@pytest.fixture(scope="session")
def server(demo_engine):
    """The demo model served with an API key (``serve_helpers.API_KEY``)."""
    s = start_server(demo_engine, api_key=API_KEY)
    yield s
    s.stop()
