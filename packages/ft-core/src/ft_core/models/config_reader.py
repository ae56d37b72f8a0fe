"""config.json as read by every architecture's parser (config_parse.py): ``HubConfig`` (fields by
their hub names or aliases, checked against their kinds in config_fields.py, errors naming the file
and the field) and the parts all architectures share: rope, quantisation, EOS ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ft_core.errors import CheckpointError
from ft_core.models.config_fields import KINDS, check_field
from ft_core.model_config import QuantConfig, RopeConfig


# The same quantity under the names hub checkpoints and transformers' save_pretrained use.
_ALIASES = {
    "num_experts": ("num_local_experts", "n_routed_experts"),
    "num_local_experts": ("num_experts", "n_routed_experts"),
    "n_routed_experts": ("num_local_experts", "num_experts"),
}


class HubConfig:
    """config.json with errors that name the file and the field."""

    def __init__(self, d: dict, path: Path):
        self.d, self.path = d, path

    def _find(self, key: str) -> Any:
        """The value of ``key`` (or an alias), checked against its kind in config_fields.KINDS."""
        for k in (key, *_ALIASES.get(key, ())):
            if self.d.get(k) is not None:
                return check_field(self.path, k, self.d[k], KINDS.get(k))
        return None

    def key_of(self, *keys: str) -> str:
        """The first of ``keys`` (or aliases) config.json holds; else the first (for messages)."""
        for key in keys:
            for k in (key, *_ALIASES.get(key, ())):
                if self.d.get(k) is not None:
                    return k
        return keys[0]

    def req(self, key: str) -> Any:
        v = self._find(key)
        if v is None:
            raise CheckpointError(f"{self.path}: required field {key!r} is missing")
        return v

    def get(self, key: str, default: Any = None) -> Any:
        v = self._find(key)
        return default if v is None else v


def rope_of(
    c: HubConfig, head_dim: int, *, interleaved: bool = False, default_partial: float = 1.0
) -> RopeConfig:
    params = dict(c.get("rope_parameters", {}))
    if "full_attention" in params and isinstance(
        params["full_attention"], dict
    ):  # nested per layer type
        params = dict(params["full_attention"])
    legacy = c.get("rope_scaling", {}) or {}
    params = {**legacy, **params}
    kind = params.get("rope_type", params.get("type", "default"))
    theta = params.get("rope_theta", c.get("rope_theta", 10000.0))
    partial = params.get("partial_rotary_factor", c.get("partial_rotary_factor", default_partial))
    if kind not in ("default", "yarn"):
        raise CheckpointError(f"{c.path}: rope type {kind!r} is not supported (default, yarn)")
    return RopeConfig(
        theta=float(theta),
        dim=int(head_dim * partial),
        kind=kind,
        factor=float(params.get("factor", 1.0) or 1.0),
        original_max_position=int(
            params.get("original_max_position_embeddings")
            or c.get("original_max_position_embeddings")
            or c.get("max_position_embeddings", 0)
        ),
        beta_fast=float(params.get("beta_fast") or 32.0),
        beta_slow=float(params.get("beta_slow") or 1.0),
        mscale=params.get("mscale"),
        mscale_all_dim=params.get("mscale_all_dim"),
        attention_factor=params.get("attention_factor"),
        truncate=bool(params.get("truncate", True)),
        interleaved=interleaved,
    )


def quant_of(c: HubConfig) -> QuantConfig | None:
    q = c.get("quantization_config")
    if not q:
        return None
    method = q.get("quant_method")
    if method == "fp8":
        block = q.get("weight_block_size")
        if not block:
            raise CheckpointError(
                f"{c.path}: fp8 quantization_config needs weight_block_size (per-tensor fp8 is not supported)"
            )
        return QuantConfig(
            "fp8", (int(block[0]), int(block[1])), tuple(q.get("modules_to_not_convert") or ())
        )
    if method == "mxfp4":
        return QuantConfig("mxfp4", None, tuple(q.get("modules_to_not_convert") or ()))
    raise CheckpointError(
        f"{c.path}: quantization method {method!r} is not supported (fp8 block-scaled, mxfp4)"
    )


def eos_of(c: HubConfig) -> tuple[int, ...]:
    e = c.get("eos_token_id")
    return tuple(e) if isinstance(e, list) else (() if e is None else (int(e),))
