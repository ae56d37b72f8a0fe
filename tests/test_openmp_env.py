"""Each way into ft (``import ft_kernels``, ``import ft_core``, the ``ft`` command's module) sets OMP_WAIT_POLICY
to PASSIVE before torch is imported -- OpenMP reads it once, when torch loads it -- and keeps a value the
environment already has (ft_kernels/__init__.py says why)."""

import os
import subprocess
import sys

import pytest

# An import hook that prints OMP_WAIT_POLICY as it is at the moment torch's import starts.
SPY = """
import importlib.abc, os, sys
class Spy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and "torch" not in sys.modules:
            print("at torch import:", os.environ.get("OMP_WAIT_POLICY"), flush=True)
        return None
sys.meta_path.insert(0, Spy())
import {module}
"""


def _policy_at_torch_import(module: str, env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if env_value is not None:
        env["OMP_WAIT_POLICY"] = env_value
    res = subprocess.run(
        [sys.executable, "-c", SPY.format(module=module)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("at torch import:")]
    assert len(lines) == 1, res.stdout
    return lines[0].removeprefix("at torch import: ")


@pytest.mark.parametrize("module", ["ft_kernels", "ft_core", "ft_serve.cli"])
def test_passive_before_torch_loads(module):
    assert _policy_at_torch_import(module, None) == "PASSIVE"


def test_a_given_policy_is_kept():
    assert _policy_at_torch_import("ft_core", "ACTIVE") == "ACTIVE"
