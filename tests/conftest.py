"""Shared fixtures of the workspace tests: tiny random checkpoints of real architectures."""

import sys
from pathlib import Path

import pytest

# The helpers beside this file are plain modules (pytest runs with --import-mode=importlib).
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import tiny_checkpoints  # noqa: E402


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory):
    """``tiny_ckpt(arch, variant=None) -> Path``: the checkpoint, built once per session.

    The directories are shared by every test of the session: copy one before damaging it.
    """
    cache: dict[tuple[str, str | None], Path] = {}

    def get(arch: str, variant: str | None = None) -> Path:
        key = (arch, variant)
        if key not in cache:
            name = arch if variant is None else f"{arch}-{variant}"
            cache[key] = tiny_checkpoints.make_checkpoint(
                arch, tmp_path_factory.mktemp(name) / name, variant
            )
        return cache[key]

    return get
