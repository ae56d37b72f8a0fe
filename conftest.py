"""Workspace-wide pytest setup.

The test models are tiny: torch's intra-op threads only add synchronisation, and on a 2-core
machine where another process holds a core they make a forward up to ~100x slower (OpenMP
workers spin waiting for the busy core). One thread keeps the suite fast and its timing stable.

flash-linear-attention (``fla``, a dev dependency) is hidden from the test process: transformers'
Qwen3-Next / Qwen3.5 modeling imports it when installed (~25 s) and then runs its Triton kernels,
which need a GPU driver, instead of its torch path; our references must stay torch on the CPU. The fla
parity tests (packages/ft-core/tests/layers/test_gated_delta_fla.py) run fla in their own processes.
"""

import sys

import torch

torch.set_num_threads(1)
sys.modules.setdefault("fla", None)  # `import fla` raises ImportError in this process


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` run only where torch sees a CUDA device (benchmarks/gpu_check.py)."""
    import pytest

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
