"""Exceptions the engine raises for bad input. Each message names the file, tensor, field or limit."""


class FTError(Exception):
    """Base of every error ft raises on purpose; the CLI prints its message without a traceback."""


class CheckpointError(FTError):
    """A checkpoint directory, file or tensor is missing, malformed, truncated or of the wrong shape."""


class UnsupportedArchitectureError(CheckpointError):
    """config.json names a ``model_type`` ft does not implement."""


class RequestError(FTError):
    """A generation request is invalid (empty prompt, too long for the context, bad sampling field)."""
