"""ServerConfig: the one frozen configuration of ``ft serve`` (the engine has its own EngineConfig)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerConfig:
    model_name: str  # the id /v1/models reports and responses echo (--served-model-name)
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None  # when set, every /v1 call needs it (Authorization: Bearer or x-api-key)
    max_running_requests: int = 16
    max_waiting_requests: int = 256  # beyond this, 503 with Retry-After
    tool_call_parser: str = "auto"
    reasoning_parser: str = "auto"
    drain_seconds: float = 30.0  # SIGINT/SIGTERM: how long running requests may finish
    default_max_tokens: int | None = None  # when a request names none: the rest of the context
    secret: bytes = b""  # signs thinking blocks / reasoning items handed to clients (set at start-up)
