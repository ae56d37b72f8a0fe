import shutil
import sys
from pathlib import Path

import pytest

# The helpers beside this file (fla_interpret.py) and the workspace tests' (bounds.py, engine_spy.py,
# tiny_checkpoints.py) are plain modules (pytest runs with --import-mode=importlib), for the tests of
# every subfolder.
_HERE = Path(__file__).resolve().parent
for _helpers in (str(_HERE.parents[2] / "tests"), str(_HERE)):
    if _helpers not in sys.path:
        sys.path.insert(0, _helpers)

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
