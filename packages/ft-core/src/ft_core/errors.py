"""Exceptions the engine raises for bad input. Each message names the file, tensor, field or limit."""


class FTError(Exception):
    """Base of every error ft raises on purpose; the CLI prints its message without a traceback."""


class CheckpointError(FTError):
    """A checkpoint directory, file or tensor is missing, malformed, truncated or of the wrong shape."""


class UnsupportedArchitectureError(CheckpointError):
    """config.json names a ``model_type`` ft does not implement."""


class RequestError(FTError):
    """A generation request is invalid (empty prompt, too long for the context, bad sampling field)."""


class NonFiniteError(FTError):
    """The model produced NaN/inf logits for some sequences of one ``Engine.step`` (corrupt
    weights or an overflow). Raised once per failure, after the step finished everything else:

    - ``seq_ids``: the failed sequences, already finished (finish_reason "error", pages freed,
      nothing cached): fail their requests (a 500 "model produced non-finite values").
    - ``advanced``: the step's other sequences, which advanced normally (their tokens are sampled):
      send their updates as for a normal step.
    - ``where``: where the first non-finite value appeared ("layer 3 mlp", "the embedding", ...).
    """

    def __init__(self, seq_ids: tuple[int, ...], where: str, advanced: list | None = None):
        super().__init__(f"model produced non-finite values (NaN/inf logits; first in {where})")
        self.seq_ids, self.where, self.advanced = seq_ids, where, advanced or []
