"""ft kernels: CPU expert kernels (nanobind C++) with a torch reference twin for each."""

from ft_kernels.cpu import active_isa, moe_swiglu
from ft_kernels import reference

__all__ = ["active_isa", "moe_swiglu", "reference"]
__version__ = "0.1.0"
