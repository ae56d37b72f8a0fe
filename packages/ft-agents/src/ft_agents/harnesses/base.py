"""What every harness adapter provides: its npm package and binary, the API it speaks, and a ``plan``
(environment, private config files, arguments, links to its kept sessions) made from the server's numbers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from ft_agents.server import ServerInfo

KEY_ENV = "FT_AGENTS_API_KEY"  # the variable that carries the server's API key to harnesses that read keys by name
LOCAL_KEY = "ft-local"  # sent when the server needs no key (harnesses refuse to start without one)
OUTPUT_MIN, OUTPUT_MAX = 256, 32000
REQUEST_TIMEOUT_S = 3600  # local prefill of a 20k-token agent prompt can take minutes on a CPU


def default_output_limit(context_length: int) -> int:
    """Output tokens per request: a quarter of the context, within [OUTPUT_MIN, OUTPUT_MAX]."""
    return max(OUTPUT_MIN, min(OUTPUT_MAX, context_length // 4))


@dataclass(frozen=True)
class Setup:
    """Everything a harness adapter may use. ``config_dir`` is private to this launch; ``sessions_dir`` is
    the harness's conversation store, kept across launches."""

    server: ServerInfo
    config_dir: Path
    cwd: Path
    api_key: str  # the server's key, or LOCAL_KEY
    output_limit: int
    sessions_dir: Path

    @property
    def model(self) -> str:
        return self.server.model_id

    @property
    def context(self) -> int:
        return self.server.context_length


@dataclass(frozen=True)
class Plan:
    env: dict[str, str]  # set in the harness's environment (after the scrub)
    files: dict[Path, str]  # written (0600) before the harness starts
    args: list[str]  # the harness's arguments (after its executable)
    notes: list[str] = field(
        default_factory=list
    )  # told to the user (limits a harness cannot take, ...)
    links: dict[Path, Path] = field(
        default_factory=dict
    )  # symlink in the launch folder -> folder kept across launches


class Harness(ABC):
    name: str  # the launch name and the executable
    title: str
    package: str  # npm package
    endpoint: str  # the API path it calls
    # Context (tokens) worth running it with: its first request (system prompt + tools) with room for a
    # few turns. First requests measured: Claude Code 48.8 KB of JSON, Codex 41.6 KB, OpenClaw 37.1 KB,
    # OpenCode 30.7 KB: 8-14k tokens with a 150k-token vocabulary, 18-28k with the demo model's 1k.
    min_context: int = 32768
    node_min: tuple[int, int] | None = None  # a Node version it needs beyond what npm needs
    default_args: tuple[str, ...] = ()  # with no harness arguments: the interactive session
    # Folders of its home (relative to it) where it keeps conversations: linked into the launch's private home
    # from ``Setup.sessions_dir``, so that resume/continue find earlier launches' sessions.
    session_paths: tuple[str, ...] = ()

    @abstractmethod
    def plan(self, s: Setup, args: list[str]) -> Plan:
        """Environment, files under ``s.config_dir`` and arguments; writes nothing."""

    def args_or_default(self, args: list[str]) -> list[str]:
        return list(args) if args else list(self.default_args)

    def session_links(self, home: Path, s: Setup) -> dict[Path, Path]:
        """``home/<p>`` -> ``s.sessions_dir/<p>`` for each of ``session_paths``."""
        return {home / p: s.sessions_dir / p for p in self.session_paths}
