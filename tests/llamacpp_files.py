"""llama.cpp's own files for the GGUF tests, from the ``llama-cpp-python`` sdist on PyPI (the copy of
llama.cpp benchmarks/bench_vs_llamacpp.py builds; the same cache folder): its converter
(``convert_hf_to_gguf.py`` with ``conversion/`` and its bundled ``gguf-py``) and its vocabulary test
files (``models/ggml-vocab-NAME.gguf`` with ``.inp`` / ``.out`` vectors of llama.cpp's expected ids).
Downloaded once (~75 MB); only those members are extracted."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import tarfile
from pathlib import Path

from ft_core.paths import cache_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_vs_llamacpp import LLAMA_CPP_PYTHON as VERSION  # noqa: E402  the same llama.cpp
from bench_vs_llamacpp import pip_command  # noqa: E402

_PREFIX = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
_MEMBERS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/", "models/ggml-vocab-")


def llama_cpp_dir() -> Path:
    """The extracted llama.cpp files (their folder: ``.../vendor/llama.cpp``)."""
    root = cache_dir() / "llamacpp"
    root.mkdir(parents=True, exist_ok=True)
    out = root / "test-files" / _PREFIX
    with open(root / ".test-files.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / "convert_hf_to_gguf.py").is_file() and (out / "models").is_dir():
            return out
        sdist = root / f"llama_cpp_python-{VERSION}.tar.gz"
        if not sdist.is_file():
            subprocess.run(
                [*pip_command(), "download", "--no-binary", ":all:", "--no-deps",
                 f"llama-cpp-python=={VERSION}", "-d", str(root)],
                check=True, capture_output=True,
            )  # fmt: skip
        with tarfile.open(sdist) as tf:
            keep = [
                m for m in tf.getmembers()
                if m.name.startswith(_PREFIX) and m.name[len(_PREFIX):].startswith(_MEMBERS)
            ]  # fmt: skip
            tf.extractall(root / "test-files", members=keep, filter="data")
    return out
