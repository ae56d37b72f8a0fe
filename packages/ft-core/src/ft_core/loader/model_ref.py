"""Model references users already have: ``ollama:NAME[:TAG]`` (a model pulled by Ollama: its manifest's
model layer, a GGUF blob) and ``lmstudio:NAME`` (a model folder or file under LM Studio's models folder),
resolved to the file ft opens. Anything else is a path, returned as given.

Ollama keeps ``manifests/<registry>/<namespace>/<model>/<tag>`` (JSON: ``layers`` with ``mediaType``
``application/vnd.ollama.image.model`` and a ``digest`` ``sha256:<hex>``) and ``blobs/sha256-<hex>``
under ``$OLLAMA_MODELS`` (default ``~/.ollama/models``); a bare name is ``registry.ollama.ai/library/NAME``,
the tag ``latest`` when none is given.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ft_core import env
from ft_core.errors import CheckpointError

log = logging.getLogger("ft_core.loader")
OLLAMA_MODEL = "application/vnd.ollama.image.model"


def resolve_model(ref: str) -> Path:
    """The file or directory ``ref`` names; ollama: / lmstudio: references resolved (and logged)."""
    if ref.startswith("ollama:"):
        path = ollama_model(ref.removeprefix("ollama:"))
    elif ref.startswith("lmstudio:"):
        path = lmstudio_model(ref.removeprefix("lmstudio:"))
    else:
        return Path(ref).expanduser()
    log.warning("%s -> %s", ref, path)
    return path


def _ollama_root() -> Path:
    return Path(env.text("OLLAMA_MODELS") or "~/.ollama/models").expanduser()


def ollama_model(name: str) -> Path:
    """The GGUF blob of Ollama model ``name`` ("qwen3:30b-a3b", "library/qwen3", "host/ns/model:tag")."""
    root = _ollama_root()
    model, _, tag = name.partition(":")
    parts = model.split("/")
    if len(parts) == 1:
        parts = ["registry.ollama.ai", "library", *parts]
    elif len(parts) == 2:
        parts = ["registry.ollama.ai", *parts]
    manifest = root / "manifests" / Path(*parts) / (tag or "latest")
    if not manifest.is_file():
        have = sorted(
            f"{p.parent.name}:{p.name}" for p in (root / "manifests").glob("*/*/*/*") if p.is_file()
        )
        raise CheckpointError(
            f"ollama:{name}: no manifest {manifest} (Ollama models here: "
            f"{', '.join(have) or 'none'}; $OLLAMA_MODELS sets the store)"
        )
    try:
        layers = json.loads(manifest.read_text())["layers"]
        digest = next(x["digest"] for x in layers if x.get("mediaType") == OLLAMA_MODEL)
    except (json.JSONDecodeError, KeyError, TypeError, StopIteration) as e:
        raise CheckpointError(
            f"{manifest}: not an Ollama manifest with a model layer ({e!r})"
        ) from e
    blob = root / "blobs" / digest.replace(":", "-")
    if not blob.is_file():
        raise CheckpointError(
            f"{manifest}: its model blob {blob} is missing (pull the model again)"
        )
    return blob


def _lmstudio_roots() -> list[Path]:
    if v := env.text("LMSTUDIO_MODELS"):
        return [Path(v).expanduser()]
    return [Path("~/.lmstudio/models").expanduser(), Path("~/.cache/lm-studio/models").expanduser()]


def lmstudio_model(name: str) -> Path:
    """The GGUF of LM Studio model ``name`` ("publisher/model" folder, or a file path under it); a folder
    with several GGUFs must be narrowed to one (the first part of a split model counts once)."""
    for root in _lmstudio_roots():
        p = root / name
        if p.is_file():
            return p
        if p.is_dir():
            files = sorted(f for f in p.rglob("*.gguf") if "mmproj" not in f.name)
            firsts = [f for f in files if "-of-" not in f.name or "-00001-of-" in f.name]
            if len(firsts) == 1:
                return firsts[0]
            if not firsts:
                raise CheckpointError(f"lmstudio:{name}: no .gguf file in {p}")
            rel = ", ".join(str(f.relative_to(root)) for f in firsts)
            raise CheckpointError(f"lmstudio:{name}: several models in {p}; name one of: {rel}")
    raise CheckpointError(
        f"lmstudio:{name}: not found under {' or '.join(map(str, _lmstudio_roots()))} "
        "($LMSTUDIO_MODELS sets the folder)"
    )
