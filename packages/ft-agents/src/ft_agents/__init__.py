"""ft-agents: launchers for coding agents on a local ft server (issue 6; only the package exists yet)."""

__version__ = "0.1.0"
