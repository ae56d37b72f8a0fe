"""Workspace-wide pytest setup.

The test models are tiny: torch's intra-op threads only add synchronisation, and on a 2-core
machine where another process holds a core they make a forward up to ~100x slower (OpenMP
workers spin waiting for the busy core). One thread keeps the suite fast and its timing stable.
"""

import torch

torch.set_num_threads(1)
