"""ft-core: the engine. ``Engine.from_pretrained(path)`` then ``score`` / ``generate``."""

import ft_kernels  # noqa: F401  # first: it sets OpenMP's wait policy before torch loads (ft_kernels/__init__.py)
from ft_core.config import EngineConfig
from ft_core.engine import Engine
from ft_core.errors import (
    CheckpointError,
    FTError,
    NonFiniteError,
    RequestError,
    UnsupportedArchitectureError,
)
from ft_core.sampling import SamplingParams
from ft_core.sequence import GenerationOutput

__all__ = [
    "Engine",
    "EngineConfig",
    "SamplingParams",
    "GenerationOutput",
    "FTError",
    "CheckpointError",
    "RequestError",
    "UnsupportedArchitectureError",
    "NonFiniteError",
]
__version__ = "0.1.0"
