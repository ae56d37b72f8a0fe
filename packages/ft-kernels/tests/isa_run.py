"""Run a test module's ``run_all()`` in a fresh process under one instruction set: FT_CPU_ISA is read once per
process, so each ISA this CPU has gets its own interpreter (the kernel tests' ``test_each_isa``)."""

from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_all_in_isa(module: str, isa: str, timeout: int = 600) -> None:
    """Import ``module`` (a file of this folder) with FT_CPU_ISA=isa, check the ISA took, call its run_all();
    fails with the child's stderr tail."""
    code = f"""
import sys, ft_kernels as fk
sys.path.insert(0, {HERE!r})
assert fk.active_isa() == {isa!r}
import {module}
{module}.run_all()
"""
    res = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "FT_CPU_ISA": isa},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert res.returncode == 0, res.stderr[-3000:]
