"""Expert banks (host, flat id = moe_layer * E + expert) and the backends that compute routes on them."""

from ft_core.experts.bank import ExpertBank
from ft_core.experts.backends import IMPLS, ExpertBackend, select_impl

__all__ = ["ExpertBank", "ExpertBackend", "IMPLS", "select_impl"]
