import shutil

import pytest

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
