import shutil
import sys
from pathlib import Path

import pytest

# The workspace tests' helpers (bounds.py, tiny_checkpoints.py) are plain modules, as here.
_WORKSPACE_TESTS = str(Path(__file__).resolve().parents[3] / "tests")
if _WORKSPACE_TESTS not in sys.path:
    sys.path.insert(0, _WORKSPACE_TESTS)

from ft_core.demo import write_demo_model


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory):
    """A fresh copy of the built-in demo checkpoint, written by ft_core.demo (not the user cache)."""
    return write_demo_model(tmp_path_factory.mktemp("demo") / "demo")


@pytest.fixture
def demo_copy(demo_dir, tmp_path):
    """A private copy of the demo checkpoint that a test may damage."""
    dst = tmp_path / "ckpt"
    shutil.copytree(demo_dir, dst)
    return dst
