"""Whether flash-linear-attention (PyPI ``flash-linear-attention``, import name ``fla``) can run the
gated delta rule here: the capability check ``EngineConfig`` resolves ``linear_attn_impl`` with, kept
in a leaf so the config needs no layer module (``layers/gated_delta_fla.py`` holds the kernels).
"""

from __future__ import annotations

import functools

from ft_core import env
from ft_core.errors import FTError

INSTALL = "pip install 'ft-core[fla]' (flash-linear-attention==0.6.0)"


@functools.cache
def _import_error() -> str | None:
    """Why ``fla`` cannot be used (None when it imports). Importing fla takes ~15 s: asked once per
    process."""
    try:
        import fla.ops.gated_delta_rule  # noqa: F401
    except Exception as e:  # ImportError, or a broken triton install raising at import
        return f"{type(e).__name__}: {e}"
    return None


def fla_available() -> bool:
    """True when flash-linear-attention's gated delta rule kernels import (cached)."""
    return _import_error() is None


def require_fla(device: str) -> None:
    """FTError unless the fla kernels can run for ``device``: the package imports, and the device is
    CUDA (on the CPU, Triton runs kernels only in its interpreter, TRITON_INTERPRET=1, which tests
    use)."""
    err = _import_error()
    if err is not None:
        raise FTError(
            f"linear_attn_impl 'fla' needs the flash-linear-attention package ({err}); "
            f"install it: {INSTALL}"
        )
    if not device.startswith("cuda") and not env.flag("TRITON_INTERPRET"):
        raise FTError(
            f"linear_attn_impl 'fla' runs Triton kernels: it needs device 'cuda', not "
            f"{device!r} (use linear_attn_impl 'torch' or 'auto')"
        )
