"""Elastic memory (DESIGN §5): one budget split between KV pages, expert-cache slots and recurrent-state
checkpoint slots, resized at run time without a restart."""

from ft_core.memory.elastic import ElasticPolicy, file_source, torch_cuda_source
from ft_core.memory.manager import MemoryManager, ResizeRefused, parse_bytes
from ft_core.memory.pools import MemoryPools

__all__ = [
    "MemoryManager",
    "MemoryPools",
    "ResizeRefused",
    "parse_bytes",
    "ElasticPolicy",
    "file_source",
    "torch_cuda_source",
]
