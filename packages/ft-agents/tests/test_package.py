"""ft-agents talks to servers over HTTP: it must not depend on the engine packages."""

import tomllib
from pathlib import Path

import ft_agents


def test_no_engine_dependency():
    meta = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    deps = " ".join(meta["project"]["dependencies"])
    assert "ft-core" not in deps and "ft-kernels" not in deps
    assert ft_agents.__version__ == meta["project"]["version"]
