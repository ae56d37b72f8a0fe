"""ServerConfig: the one frozen configuration of ``ft serve`` (the engine has its own EngineConfig)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerConfig:
    model_name: str  # the id /v1/models reports and responses echo (--served-model-name)
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = (
        None  # when set, every /v1 call needs it (Authorization: Bearer or x-api-key)
    )
    max_running_requests: int = 16
    max_waiting_requests: int = 256  # beyond this, 503 with Retry-After
    tool_call_parser: str = "auto"
    reasoning_parser: str = "auto"
    drain_seconds: float = 30.0  # SIGINT/SIGTERM: how long running requests may finish
    max_body_size: int = 32 << 20  # bytes of one request body; more -> 413 (--max-body-size)
    # /health answers 503 "wedged" when the engine has work and has not ticked for this long
    # (one step: a long CPU prefill chunk can take minutes on a big model)
    engine_stall_seconds: float = 300.0
    default_max_tokens: int | None = None  # when a request names none: the rest of the context
    secret: bytes = (
        b""  # signs thinking blocks / reasoning items handed to clients (set at start-up)
    )
    admin_key: str | None = (
        None  # /v1/admin/*: this key or api_key; with neither, loopback callers only
    )
    admin_allow_remote: bool = False  # /v1/admin/* from non-loopback addresses
    # browser rules (server/guard.py): pages of these origins may call (CORS); "*" any page
    allowed_origins: tuple[str, ...] = ()
    # Host names answered besides loopback, IP literals and --host ("*": any; DNS rebinding)
    allowed_hosts: tuple[str, ...] = ()
    metrics_public: bool = False  # /metrics without the API key
    elastic: str = "off"  # off | auto: follow the device's free memory
    elastic_source: str = (
        "cuda"  # where free memory is read: cuda | file:PATH (a byte count; simulation)
    )
    elastic_reserve: int = 1 << 30  # bytes auto mode leaves free for other programs
    elastic_interval: float = 1.0  # seconds between polls
