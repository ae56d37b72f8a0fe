"""Expert banks (host, flat id = moe_layer * E + expert) and the backends that compute routes on them."""

from ft_core.experts.bank import ExpertBank
from ft_core.experts.backends import BACKENDS, ExpertBackend, select_backend

__all__ = ["ExpertBank", "ExpertBackend", "BACKENDS", "select_backend"]
