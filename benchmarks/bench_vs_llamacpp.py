"""ft side by side with llama.cpp on the same random weights: prefill and decode tok/s, bytes per token.

    uv run python benchmarks/bench_vs_llamacpp.py [--shape mid|deep] [--formats bf16,mxfp4,int4]
        [--threads 1,2] [--rounds 3] [--prompt 128,512] [--decode 64] [--model DIR] [--llama-cpp DIR]
        [--work DIR] [--vocab gpt-2|qwen2] [--ft-dense-format FMT] [--ft-int8] [--ft-gguf]
        [--gguf FILE] [--isa native|avx2|avxvnni] [--json FILE]

What: one random bf16 ``qwen3_moe`` checkpoint (Hugging Face safetensors, ``random_ckpt.py``), run by
both engines in three weight formats: ``bf16`` (ft: the HF directory; llama.cpp: BF16 GGUF),
``mxfp4`` (ft: ``ft convert --format mxfp4``; llama.cpp: ``llama-quantize MXFP4_MOE``) and ``int4``
(ft: ``ft convert --format int4``; llama.cpp: ``Q4_0``). ft's converted files keep the dense weights
in bf16, llama.cpp's quantised files quantise them too: the bytes-per-token column shows it.
``--ft-dense-format int4_sym`` gives ft the same choice for the 4-bit formats (``EngineConfig.dense_format``),
``--ft-int8`` adds int8 activations (``EngineConfig.int8_activations``, opt-in, llama.cpp's q8_0 scheme).
``q8_0`` (not in the default list): ft ``--format int8`` (int8_sym, group 32) against llama.cpp's Q8_0.
``--ft-gguf``: ft loads the very GGUF file llama.cpp runs (the same quantised bits; ft keeps Q4_0,
MXFP4, Q8_0 and BF16 experts as they are and dequantises the dense tensors to bf16); ``--gguf FILE``
runs both engines on a GGUF file of any model ft reads.

Shapes (``--shape``): ``mid`` = hidden 2048, moe_intermediate 768, 128 experts top-8, 16 query / 4 KV
heads of 128 (Qwen3-30B-A3B's expert and attention sizes), 6 layers (~7.8 GB); ``deep`` = 48 layers
of 16 experts, the same sizes otherwise (~8.7 GB); ``--model DIR`` takes any ``qwen3_moe``
checkpoint instead (its tokenizer must be one llama.cpp's converter knows). ``tiny`` (2 layers, 16
experts) is for smoke tests. The tokenizer is rebuilt as a ``tokenizers`` BPE from a vocabulary file
llama.cpp ships (``models/ggml-vocab-gpt-2.gguf``, 50257 tokens; ``--vocab qwen2``: Qwen's own,
151936 tokens and a 622 MB LM head) and checked against llama.cpp's test vectors, so that its
converter recognises the pre-tokenizer, as it does for real checkpoints.

How: files go under ``--work`` (default ``~/.cache/ft/bench_vs_llamacpp/<shape>-<vocab>``) and are
reused when present: the checkpoint, the GGUFs (llama.cpp's own ``convert_hf_to_gguf.py --outtype
bf16``, run with this interpreter and llama.cpp's bundled ``gguf-py``; then ``llama-quantize``), the
FTW directories. llama.cpp is ``--llama-cpp DIR`` (a source tree with ``build/bin/llama-bench`` and
``llama-quantize``), else the one vendored in the ``llama-cpp-python==0.3.36`` sdist under
``~/.cache/ft/llamacpp``, built there once (``-DGGML_NATIVE=ON``, Release; on CPUs that list AMX the same
extensions without it, in ``build-noamx``: ``_native_flags``) when its binaries are
missing (``--isa avx2``: built for AVX2 only in ``build-avx2``, and ft run with ``FT_CPU_ISA=avx2
FT_AVX_VNNI=0``; ``--isa avxvnni``: AVX2 and AVX-VNNI in ``build-avxvnni``, ft with ``FT_AVX_VNNI=1``).
Then ``--rounds`` rounds; in each, for every format and thread count, back to back: the read
bandwidth (``ft_core.experts.probe.read_bandwidth`` on that many threads; again after each engine's
run, so each engine's run lies between two samples), ft in a fresh process
(``FT_NUM_THREADS`` = ``OMP_NUM_THREADS`` = N, ``torch.set_num_threads(N)``, ``Engine.from_pretrained(
dtype="bfloat16", prefix_cache=False)``, one warm-up generation, then per prompt length a warm-up
prompt of that length and the timed one, each with ``max_tokens=1`` -- distinct random token ids --
and ``--decode`` tokens, batch 1, greedy, after a 1-token prompt), then ``llama-bench -m X.gguf -p
128,512 -n 64 -t N -r 1 -o json`` (which also runs a warm-up prompt of each length before the timed
one; its tg test also starts from an empty context). The first prompt of a length costs ft more:
torch's bf16 GEMMs (dense projections; experts with many routes where the machine sends them
there) build a oneDNN kernel for each new row count.

Columns: ``ppP`` prefill tok/s of a P-token prompt; ``decode`` tok/s; ``MB/tok`` weight bytes one
decode token reads (ft: ``weight_bytes_per_token()``; llama.cpp: every GGUF tensor but the token
embedding, the ``*_exps`` expert tensors scaled by top_k / experts); ``of BW`` decode tok/s x bytes
per token / ``read GB/s``, the mean of the two read-bandwidth samples around that engine's run (a
shared or virtual machine's bandwidth can change between runs: one sample a pair has put an engine's
decode against another level of it); ``RSS GB`` the child's peak resident set (``ru_maxrss``
from ``wait4`` in a small launcher process; mapped file pages included; the JSON also has ft's own
``VmHWM``). Each cell is the median over rounds with [min-max] when there are
several; the ``ft/llama`` row is the median of the per-round ratios. Not part of CI.

``--depth D`` measures both engines after a D-token context, as a coding agent's later turns run: llama-bench
``-d D`` (its pp and tg tests each start from a D-token context, filled untimed); ft keeps its prefix cache on,
prefills the D tokens once (untimed), then times the same D tokens plus P new ones (the D reused from the
cache, so only the P are computed, attending to all D + P) and decode after D + 1 tokens. Contexts past the
generated model's trained length are let through (``FT_ALLOW_LONG_MAX_MODEL_LEN=1``: random weights, speed
only). ``of BW`` still counts weight bytes only; at depth each decode token also reads its context's keys and
values (the same bytes for both engines: bf16 / f16 caches).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from random_ckpt import Shape, write_checkpoint  # noqa: E402

# OMP_WAIT_POLICY as the user gave it: importing ft sets PASSIVE in this process (ft_kernels/__init__.py), and
# llama.cpp's OpenMP threads must not inherit that (passive, its 2-thread decode ran at about half speed)
USER_OMP_WAIT_POLICY = os.environ.get("OMP_WAIT_POLICY")
LLAMA_CPP_PYTHON = "0.3.36"  # the llama-cpp-python sdist whose vendored llama.cpp is built
SHAPES = {
    "mid": Shape(layers=6, experts=128, heads=16, kv_heads=4),
    "deep": Shape(layers=48, experts=16, heads=16, kv_heads=4),
    "tiny": Shape(layers=2, experts=16, heads=16, kv_heads=4),  # smoke tests
}
# format -> (ft: FTW --format or None for the HF directory, llama.cpp: GGUF type)
FORMATS = {
    "bf16": (None, "BF16"),
    "mxfp4": ("mxfp4", "MXFP4_MOE"),
    "int4": ("int4", "Q4_0"),
    "q8_0": ("int8", "Q8_0"),
    # llama-quantize's K-quant mixes: compare on the same file (--ft-gguf); without it ft runs its own
    # uniform conversion of the checkpoint (ft convert --format q4_k / q6_k), not the same bits
    "q4_k_m": ("q4_k", "Q4_K_M"),
    "q6_k": ("q6_k", "Q6_K"),
    "q3_k_m": (None, "Q3_K_M"),  # --ft-gguf only (ft convert does not quantise to 3 bits)
    "q5_k_m": (
        None,
        "Q5_K_M",
    ),  # --ft-gguf only (ft convert --format q5_k is uniform, not this mix)
}
VOCABS = {"gpt-2": 50257, "qwen2": 151936}  # llama.cpp vocabulary file -> entries (= vocab_size)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def log(msg: str) -> None:
    print(msg, flush=True)


# ---- llama.cpp ---------------------------------------------------------------------------------
def default_llama_dir() -> Path:
    from ft_core.paths import cache_dir

    return (
        cache_dir() / "llamacpp" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}" / "vendor" / "llama.cpp"
    )


def _native_flags() -> tuple[str, list[str]]:
    """llama.cpp's build folder and CMake flags for this CPU: -DGGML_NATIVE=ON, except where /proc/cpuinfo lists
    AMX: then every GGML_AVX* extension the CPU lists and no AMX, in ``build-noamx``. A native build there enables
    ggml's AMX matmul, which died with a general-protection fault at its ``ldtilecfg`` on the first prompt (a
    2-core Sapphire-Rapids-class VM, where a plain AMX tile product of our own ran) with or without our runs;
    ``--repack 0`` avoids it but also turns off ggml's other CPU repacks, so the bench would measure a slower
    llama.cpp than its users run."""
    try:
        flags = set(open("/proc/cpuinfo").read().split())  # noqa: SIM115
    except OSError:
        flags = set()
    if "amx_tile" not in flags:
        return "build", ["-DGGML_NATIVE=ON"]
    have = {
        "GGML_AVX": "avx",
        "GGML_AVX2": "avx2",
        "GGML_FMA": "fma",
        "GGML_F16C": "f16c",
        "GGML_BMI2": "bmi2",
        "GGML_AVX_VNNI": "avx_vnni",
        "GGML_AVX512": "avx512bw",
        "GGML_AVX512_VBMI": "avx512vbmi",
        "GGML_AVX512_VNNI": "avx512_vnni",
        "GGML_AVX512_BF16": "avx512_bf16",
    }
    return "build-noamx", ["-DGGML_NATIVE=OFF"] + [
        f"-D{k}={'ON' if f in flags else 'OFF'}" for k, f in have.items()
    ]


# --isa: llama.cpp's build folder (in its source tree) and CMake flags for ft's instruction set of that name
LLAMA_BUILDS = {
    "native": _native_flags(),
    "avx2": (
        "build-avx2",
        [
            "-DGGML_NATIVE=OFF",
            "-DGGML_AVX=ON",
            "-DGGML_AVX2=ON",
            "-DGGML_FMA=ON",
            "-DGGML_F16C=ON",
            "-DGGML_AVX512=OFF",
        ],
    ),
    "avxvnni": (
        "build-avxvnni",
        [
            "-DGGML_NATIVE=OFF",
            "-DGGML_AVX=ON",
            "-DGGML_AVX2=ON",
            "-DGGML_AVX_VNNI=ON",
            "-DGGML_FMA=ON",
            "-DGGML_F16C=ON",
            "-DGGML_AVX512=OFF",
        ],
    ),
}
# --isa: the FT_ variables ft runs under (FT_CPU_ISA; FT_AVX_VNNI: avx2 is a Zen 2/3 machine's path, avxvnni an
# Alder-Lake-class Intel desktop's, AVX2 with `vpdpwssd` / `vpdpbusd` on ymm, for both engines)
FT_ISA_ENV = {
    "native": {},
    "avx2": {"FT_CPU_ISA": "avx2", "FT_AVX_VNNI": "0"},
    "avxvnni": {"FT_CPU_ISA": "avx2", "FT_AVX_VNNI": "1"},
}
_llama_build = "native"  # set once by main from --isa


def llama_bins(d: Path) -> tuple[Path, Path]:
    b = d / LLAMA_BUILDS[_llama_build][0] / "bin"
    return b / "llama-bench", b / "llama-quantize"


@contextmanager
def file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def pip_command() -> list[str]:
    import importlib.util

    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    for name in ("pip3", "pip"):
        if shutil.which(name):
            return [name]
    if shutil.which("uvx"):
        return ["uvx", "pip"]
    raise SystemExit("no pip found to download the llama-cpp-python sdist; pass --llama-cpp DIR")


def ensure_llama_cpp(arg: str | None) -> Path:
    """The llama.cpp source tree with built llama-bench and llama-quantize (built once in the cache)."""
    if arg:
        d = Path(arg).expanduser().resolve()
        missing = [p for p in (*llama_bins(d), d / "convert_hf_to_gguf.py") if not p.exists()]
        if missing:
            raise SystemExit(f"--llama-cpp {d}: missing {', '.join(map(str, missing))}")
        return d
    d = default_llama_dir()
    root = d.parents[1]  # .../llamacpp/llama_cpp_python-X
    with file_lock(root.parent / ".build.lock"):
        if all(p.exists() for p in llama_bins(d)):
            return d
        if not d.is_dir():
            sdist = root.parent / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
            if not sdist.exists():
                log(
                    f"downloading the llama-cpp-python=={LLAMA_CPP_PYTHON} sdist into {root.parent}"
                )
                subprocess.run(
                    [
                        *pip_command(),
                        "download",
                        "--no-binary",
                        ":all:",
                        "--no-deps",
                        f"llama-cpp-python=={LLAMA_CPP_PYTHON}",
                        "-d",
                        str(root.parent),
                    ],
                    check=True,
                )
            with tarfile.open(sdist) as tf:
                tf.extractall(root.parent, filter="data")
        build_log = root.parent / "build.log"
        build, flags = LLAMA_BUILDS[_llama_build]
        log(
            f"building llama-bench and llama-quantize in {d / build} (~10-15 min on 2 cores; log {build_log})"
        )
        t0 = time.perf_counter()
        jobs = str(os.cpu_count() or 2)
        with open(build_log, "a") as f:
            for cmd in (
                [
                    "cmake",
                    "-B",
                    build,
                    *flags,
                    "-DLLAMA_CURL=OFF",
                    "-DLLAMA_OPENSSL=OFF",
                    "-DCMAKE_BUILD_TYPE=Release",
                ],
                [
                    "cmake",
                    "--build",
                    build,
                    "--target",
                    "llama-bench",
                    "llama-quantize",
                    "-j",
                    jobs,
                ],
            ):
                if subprocess.run(cmd, cwd=d, stdout=f, stderr=subprocess.STDOUT).returncode:
                    raise SystemExit(f"llama.cpp build failed: {' '.join(cmd)} (see {build_log})")
        log(f"built llama.cpp in {time.perf_counter() - t0:.0f}s")
    return d


def import_gguf(llama_dir: Path):
    """llama.cpp's bundled gguf-py: the version its converter writes with (no extra dependency)."""
    sys.path.insert(0, str(llama_dir / "gguf-py"))
    import gguf

    return gguf


# ---- tokenizer ---------------------------------------------------------------------------------
def vocab_tokenizer(llama_dir: Path, name: str):
    """A ``tokenizers`` BPE rebuilt from llama.cpp's ``models/ggml-vocab-<name>.gguf`` (tokens, merges,
    token types) with the model's pre-tokenizer, checked against the test vectors shipped beside it.
    Returns (tokenizer, eos token, number of normal tokens)."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
    )

    gguf = import_gguf(llama_dir)
    path = llama_dir / "models" / f"ggml-vocab-{name}.gguf"
    f = gguf.GGUFReader(str(path)).fields
    toks, types = f["tokenizer.ggml.tokens"].contents(), f["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ", 1)) for m in f["tokenizer.ggml.merges"].contents()]
    normal = {t: i for i, t in enumerate(toks) if types[i] == gguf.TokenType.NORMAL}
    if sorted(normal.values()) != list(range(len(normal))):
        raise SystemExit(f"{path}: normal tokens are not the first ids")
    tok = Tokenizer(models.BPE(vocab=normal, merges=merges))
    if name == "qwen2":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:  # gpt-2
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = [t for i, t in enumerate(toks) if types[i] != gguf.TokenType.NORMAL]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    if len(toks) != VOCABS[name]:
        raise SystemExit(f"{path}: {len(toks)} tokens, expected {VOCABS[name]}")
    assert all(tok.token_to_id(t) == i for i, t in enumerate(toks)), (
        "token ids differ from the GGUF's"
    )
    inp = (path.parent / (path.name + ".inp")).read_text().split("\n__ggml_vocab_test__\n")
    out = (path.parent / (path.name + ".out")).read_text().split("\n")
    bad = [
        a
        for a, b in zip(inp, out)
        if tok.encode(a, add_special_tokens=False).ids != [int(x) for x in b.split()]
    ]
    if bad:
        raise SystemExit(
            f"{path.name}: the rebuilt tokenizer differs from llama.cpp's test vectors on {bad[:3]}"
        )
    eos = toks[int(f["tokenizer.ggml.eos_token_id"].contents())]
    return tok, eos, len(normal)


# ---- files ----------------------------------------------------------------------------------------
def timed(stages: dict, key: str, fn) -> None:
    t0 = time.perf_counter()
    fn()
    stages[key] = round(time.perf_counter() - t0, 2)
    log(f"  {key}: {stages[key]:.1f}s")


def atomic_dir(final: Path, write) -> None:
    """``write(tmp)`` into a temporary directory beside ``final``, renamed into place when complete."""
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f"{final.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{final.name}.tmp-", dir=final.parent))
    try:
        shutil.rmtree(tmp)
        write(tmp)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_logged(cmd: list, log_file: Path, env: dict | None = None) -> None:
    with open(log_file, "w") as f:
        res = subprocess.run([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT, env=env)
    if res.returncode:
        tail = "".join(log_file.read_text().splitlines(keepends=True)[-30:])
        raise SystemExit(
            f"{' '.join(map(str, cmd))} failed ({res.returncode}); {log_file}:\n{tail}"
        )


def prepare(args, llama_dir: Path, shape: Shape | None, work: Path, stages: dict) -> dict:
    """Checkpoint, GGUFs and FTW directories (reused when present): {format: (ft path, gguf path)}."""
    work.mkdir(parents=True, exist_ok=True)
    hf = Path(args.model).expanduser().resolve() if args.model else work / "hf"
    if args.model and not (hf / "config.json").exists():
        raise SystemExit(f"--model {hf}: no config.json")
    if not (hf / "config.json").exists():
        log(f"writing the random checkpoint ({shape.describe()}) to {hf}")
        tok, eos, _ = vocab_tokenizer(llama_dir, args.vocab)
        timed(
            stages,
            "write_checkpoint",
            lambda: atomic_dir(
                hf,
                lambda d: write_checkpoint(d, shape, tokenizer=tok, eos_token=eos, pad_token=eos),
            ),
        )
    _, quantize = llama_bins(llama_dir)
    bf16 = work / "model-bf16.gguf"
    if not bf16.exists():
        log(f"converting to GGUF BF16 with llama.cpp's convert_hf_to_gguf.py -> {bf16}")
        part = bf16.with_name(bf16.name + ".partial")

        def conv():
            run_logged(
                [
                    sys.executable,
                    llama_dir / "convert_hf_to_gguf.py",
                    hf,
                    "--outtype",
                    "bf16",
                    "--outfile",
                    part,
                ],
                work / "convert_hf_to_gguf.log",
            )
            part.rename(bf16)

        timed(stages, "convert_gguf_bf16", conv)
    out = {}
    for fmt in args.formats:
        ft_fmt, gtype = FORMATS[fmt]
        gguf_path = bf16 if gtype == "BF16" else work / f"model-{gtype.lower()}.gguf"
        if not gguf_path.exists():
            log(f"llama-quantize {gtype} -> {gguf_path}")
            part = gguf_path.with_name(gguf_path.name + ".partial")

            def quant(part=part, gguf_path=gguf_path, gtype=gtype):
                run_logged(
                    [quantize, bf16, part, gtype, max(args.threads)],
                    work / f"quantize-{gtype.lower()}.log",
                )
                part.rename(gguf_path)

            timed(stages, f"quantize_{gtype.lower()}", quant)
        ft_path = hf
        if args.ft_gguf:  # ft reads the very file llama.cpp runs
            out[fmt] = (gguf_path, gguf_path)
            continue
        if ft_fmt:
            ft_path = work / f"ftw-{ft_fmt}"
            if not (ft_path / "ftw_index.json").exists():
                log(f"ft convert --format {ft_fmt} -> {ft_path}")
                cmd = [
                    sys.executable,
                    "-m",
                    "ft_serve.cli",
                    "convert",
                    "--model",
                    hf,
                    "--out",
                    ft_path,
                    "--format",
                    ft_fmt,
                    "--overwrite",
                ]
                timed(
                    stages,
                    f"ft_convert_{ft_fmt}",
                    lambda c=cmd, f=ft_fmt: run_logged(c, work / f"ft-convert-{f}.log"),
                )
        out[fmt] = (ft_path, gguf_path)
    return out


def gguf_bytes_per_token(llama_dir: Path, path: Path) -> dict:
    """Weight bytes one decode token reads from a GGUF: all tensors but the token embedding (unless
    it is also the output), the expert tensors (``*_exps``) scaled by experts used / experts."""
    gguf = import_gguf(llama_dir)
    r = gguf.GGUFReader(str(path))
    arch = r.fields["general.architecture"].contents()
    n_exp = int(r.fields[f"{arch}.expert_count"].contents())
    top_k = int(r.fields[f"{arch}.expert_used_count"].contents())
    names = {t.name for t in r.tensors}
    dense = experts = 0
    types: dict[str, int] = {}
    for t in r.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + int(t.n_bytes)
        if t.name == "token_embd.weight" and "output.weight" in names:
            continue
        if "_exps" in t.name:
            experts += int(t.n_bytes)
        else:
            dense += int(t.n_bytes)
    return {
        "bytes_per_token": dense + experts * top_k // n_exp,
        "dense_bytes": dense,
        "expert_bytes_per_token": experts * top_k // n_exp,
        "file_bytes": path.stat().st_size,
        "bytes_by_type": types,
    }


# ---- measurements ----------------------------------------------------------------------------------
SIGILL_HINT = (
    "\n(illegal instruction: a -DGGML_NATIVE=ON build uses every extension the CPU lists, and some VMs "
    "list extensions they do not enable (AMX is left out already where listed: _native_flags). Build it "
    "with -DGGML_NATIVE=OFF and the GGML_AVX* flags (GGML_AVX512, _VBMI, _VNNI, _BF16, GGML_AVX_VNNI) "
    "of what runs, and pass that tree with --llama-cpp DIR.)"
)


def run_child(cmd: list, env: dict) -> tuple[str, str, int]:
    """Run ``cmd``; returns (stdout, stderr, peak RSS bytes of that child). The child is started by a
    small launcher process (this file, no torch), which reads the peak from ``wait4``: Linux counts a
    process's resident set from before its exec into ``ru_maxrss``, so spawned straight from this
    (large) process every child would report at least this process's size."""
    with tempfile.TemporaryDirectory() as d:
        out, err, rss = (Path(d) / n for n in ("out", "err", "rss"))
        with open(out, "w") as o, open(err, "w") as e:
            launcher = [sys.executable, __file__, "--measure-rss", str(rss)]
            rc = subprocess.run([*launcher, *map(str, cmd)], stdout=o, stderr=e, env=env).returncode
        o, e = out.read_text(), err.read_text()
        if rc:
            hint = SIGILL_HINT if rc in (-signal.SIGILL & 0xFF, 128 + signal.SIGILL) else ""
            raise SystemExit(f"{' '.join(map(str, cmd))} failed ({rc}):\n{e[-4000:]}{hint}")
        return o, e, int(rss.read_text())


def measure_rss(rss_file: str, cmd: list[str]) -> int:
    """The launcher: run ``cmd`` with this process's stdio, write its peak RSS in bytes to ``rss_file``."""
    p = subprocess.Popen(cmd)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    Path(rss_file).write_text(str(ru.ru_maxrss * 1024))
    return p.returncode


def thread_env(n: int) -> dict:
    return dict(os.environ, FT_NUM_THREADS=str(n), OMP_NUM_THREADS=str(n))


def measure_ft(
    path: Path,
    threads: int,
    prompts: list[int],
    decode: int,
    options: list[str] = (),
    depth: int = 0,
) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        path,
        "--threads",
        threads,
        "--prompt",
        ",".join(map(str, prompts)),
        "--decode",
        decode,
        "--depth",
        depth,
        *options,
    ]
    t0 = time.perf_counter()
    env = thread_env(threads)
    if depth:
        env["FT_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
    out, _, rss = run_child(cmd, env)
    res = json.loads(out.strip().splitlines()[-1])
    return {**res, "peak_rss_bytes": rss, "wall_s": time.perf_counter() - t0}


def measure_llama(
    llama_dir: Path,
    gguf_path: Path,
    threads: int,
    prompts: list[int],
    decode: int,
    bpt: int,
    depth: int = 0,
) -> dict:
    bench, _ = llama_bins(llama_dir)
    cmd = [
        bench,
        "-m",
        gguf_path,
        "-p",
        ",".join(map(str, prompts)),
        "-n",
        decode,
        "-t",
        threads,
        "-d",
        depth,
        "-r",
        1,
        "-o",
        "json",
    ]
    t0 = time.perf_counter()
    env = os.environ.copy()
    env.pop("OMP_WAIT_POLICY", None)
    if USER_OMP_WAIT_POLICY is not None:
        env["OMP_WAIT_POLICY"] = USER_OMP_WAIT_POLICY
    out, _, rss = run_child(cmd, env)
    tests = json.loads(out)
    pre = {str(t["n_prompt"]): t["avg_ts"] for t in tests if t["n_gen"] == 0}
    tg = [t["avg_ts"] for t in tests if t["n_prompt"] == 0 and t["n_gen"] == decode]
    return {
        "prefill_tok_s": pre,
        "decode_tok_s": tg[0],
        "bytes_per_token": bpt,
        "peak_rss_bytes": rss,
        "wall_s": time.perf_counter() - t0,
        "build_commit": tests[0].get("build_commit"),
        "model_type": tests[0].get("model_type"),
        "cpu_info": tests[0].get("cpu_info"),
    }


def child(args) -> None:
    """In a fresh process: load with ft, prefill each prompt length, decode; one JSON line."""
    import torch

    torch.set_num_threads(args.threads[0])
    from ft_core import Engine, SamplingParams

    t0 = time.perf_counter()
    depth = args.depth
    eng = Engine.from_pretrained(
        args.child,
        dtype="bfloat16",
        prefix_cache=depth
        > 0,  # at depth: the context is prefilled once, then reused from the cache
        kv_cache_bytes=(256 << 20)
        + 2 * depth * (128 << 10),  # <= 128 KiB a token of context, twice
        max_model_len=depth + max(args.prompt) + args.decode + 64 if depth else None,
        dense_format=args.ft_dense_format,
        int8_activations=args.ft_int8,
    )
    load_s = time.perf_counter() - t0
    n_ids = min(
        eng.tokenizer.vocab_size, eng.model_config.vocab_size
    )  # prompts of random token ids

    def ids(n: int, seed: int) -> list[int]:
        rng = random.Random(seed)
        return [rng.randrange(n_ids) for _ in range(n)]

    greedy = lambda n: SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)  # noqa: E731
    eng.generate([ids(32, 1)], greedy(2))  # warm-up: one prefill and one decode step
    ctx = ids(depth, 3)  # the context every timed request continues (none at depth 0)
    if depth:
        eng.generate([ctx], greedy(1))  # prefilled once, untimed; kept in the prefix cache
    prefill = {}
    for i, P in enumerate(args.prompt):
        # as llama-bench: a warm-up prompt of this length, then the timed one
        eng.generate([ctx + ids(P, 200 + i)], greedy(1))
        prompt = ctx + ids(P, 100 + i)
        t = time.perf_counter()
        eng.generate([prompt], greedy(1))
        prefill[str(P)] = P / (time.perf_counter() - t)
    seq = eng.add_request(ctx + ids(1, 2), greedy(args.decode + 1))
    while not seq.output_ids:  # the 1-token prefill and the first token
        eng.step()
    t = time.perf_counter()
    while not seq.finished:
        eng.step()
    decode_tps = args.decode / (time.perf_counter() - t)
    import ft_kernels

    print(
        json.dumps(
            {
                "prefill_tok_s": prefill,
                "decode_tok_s": decode_tps,
                "load_s": load_s,
                "bytes_per_token": eng.model.weight_bytes_per_token(),
                "expert_backend": eng.model.backend.name if eng.model.backend else None,
                "torch_threads": torch.get_num_threads(),
                "kernel_threads": ft_kernels.num_threads(),
                "isa": ft_kernels.active_isa(),
                "vm_hwm_bytes": vm_hwm(),
                "dense_format": args.ft_dense_format,
                "int8_activations": args.ft_int8,
                "depth": depth,
                "prefix_hit_tokens": eng.prefix_stats().get("hit_tokens") if depth else None,
            }
        )
    )


def vm_hwm() -> int:
    """This process's peak resident set (VmHWM) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


# ---- summary ----------------------------------------------------------------------------------------
def stats(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def metrics(m: dict, prompts: list[int]) -> dict:
    """One engine's run: its table cells (``m["read_bandwidth_Bps"]``: the samples around that run, averaged)."""
    bw = m["read_bandwidth_Bps"]
    out = {f"pp{P}": m["prefill_tok_s"][str(P)] for P in prompts}
    out.update(
        decode=m["decode_tok_s"],
        mb_per_token=m["bytes_per_token"] / 1e6,
        of_bw=m["decode_tok_s"] * m["bytes_per_token"] / bw,
        read_gbps=bw / 1e9,
        rss_gb=m["peak_rss_bytes"] / 1e9,
    )
    return out


def summarize(
    pairs: list[dict], formats: list[str], threads: list[int], prompts: list[int]
) -> list[dict]:
    rows = []
    for fmt in formats:
        for n in threads:
            ps = [p for p in pairs if p["format"] == fmt and p["threads"] == n]
            per = {eng: [metrics(p[eng], prompts) for p in ps] for eng in ("ft", "llama.cpp")}
            row = {"format": fmt, "threads": n}
            keys = list(per["ft"][0])
            for eng in ("ft", "llama.cpp"):
                row[eng] = {k: stats([m[k] for m in per[eng]]) for k in keys}
            row["ratio"] = {
                k: stats([a[k] / b[k] for a, b in zip(per["ft"], per["llama.cpp"])]) for k in keys
            }
            rows.append(row)
    return rows


def num(x: float, ratio: bool = False) -> str:
    return f"{x:.2f}" if ratio or x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def cell(s: dict, ratio: bool = False) -> str:
    """The median, with [min-max] when the rounds differ at the precision shown."""
    m, lo, hi = (num(s[k], ratio) for k in ("median", "min", "max"))
    return m if lo == hi else f"{m} [{lo}-{hi}]"


def print_table(rows: list[dict], prompts: list[int], rounds: int) -> None:
    cols = [f"pp{P}" for P in prompts] + ["decode", "mb_per_token", "of_bw", "read_gbps", "rss_gb"]
    heads = (
        ["format", "thr", "engine"]
        + [f"pp{P} tok/s" for P in prompts]
        + ["decode tok/s", "MB/tok", "of BW", "read GB/s", "RSS GB"]
    )
    lines = []
    for r in rows:
        for eng, label in (("ft", "ft"), ("llama.cpp", "llama.cpp"), ("ratio", "ft/llama")):
            lead = [r["format"], str(r["threads"])] if eng == "ft" else ["", ""]
            lines.append(lead + [label] + [cell(r[eng][c], eng == "ratio") for c in cols])
    w = [max(len(x) for x in col) + 2 for col in zip(heads, *lines)]
    log(
        f"\nmedian over {rounds} round(s){' [min-max]' if rounds > 1 else ''}; of BW = decode tok/s x MB/tok / "
        "read GB/s (mean of the samples around that engine's run); ft/llama = median of per-round ratios"
    )
    for line in [heads] + lines:
        log("".join(x.ljust(w[i]) if i < 3 else x.rjust(w[i]) for i, x in enumerate(line)).rstrip())


# ---- main ---------------------------------------------------------------------------------------------
def int_list(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def main() -> None:
    if sys.argv[1:2] == ["--measure-rss"]:
        sys.exit(measure_rss(sys.argv[2], sys.argv[3:]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--shape", default="mid", help="mid (default) or deep: the generated checkpoint's shape"
    )
    ap.add_argument(
        "--formats",
        default="bf16,mxfp4,int4",
        help="of bf16, mxfp4, int4, q8_0, q4_k_m, q6_k, q3_k_m, q5_k_m (default: the first three)",
    )
    ap.add_argument("--threads", type=int_list, default=[1, 2], help="thread counts (default 1,2)")
    ap.add_argument("--rounds", type=int, default=3, help="measurement rounds (default 3)")
    ap.add_argument(
        "--prompt",
        type=int_list,
        default=[128, 512],
        help="prompt lengths for prefill (default 128,512)",
    )
    ap.add_argument("--decode", type=int, default=64, help="decode tokens (default 64)")
    ap.add_argument(
        "--depth",
        type=int,
        default=0,
        help="context tokens before each prefill and decode (llama-bench -d; ft: a cached prefix; default 0)",
    )
    ap.add_argument(
        "--model",
        default=None,
        help="an existing qwen3_moe HF checkpoint instead of a generated one",
    )
    ap.add_argument(
        "--llama-cpp",
        default=None,
        help="a built llama.cpp tree (build/bin/llama-bench, llama-quantize; build-noamx/bin on CPUs that list AMX; "
        "with --isa avx2 / avxvnni: build-avx2/bin, build-avxvnni/bin)",
    )
    ap.add_argument(
        "--isa",
        default="native",
        choices=sorted(LLAMA_BUILDS),
        help="avx2: ft with FT_CPU_ISA=avx2 FT_AVX_VNNI=0 against llama.cpp built for AVX2 only (its own build "
        "folder, build-avx2): the Zen 2/3 path measured on a newer machine; avxvnni: the same with AVX-VNNI on "
        "both sides (FT_AVX_VNNI=1; build-avxvnni): an Alder-Lake-class Intel desktop's path (default native)",
    )
    ap.add_argument(
        "--work", default=None, help="where the generated files go (default: ft's cache dir)"
    )
    ap.add_argument(
        "--vocab", default="gpt-2", choices=VOCABS, help="tokenizer of the generated checkpoint"
    )
    ap.add_argument(
        "--ft-dense-format",
        default=None,
        help="4-bit formats only: ft re-quantises its dense projections to this kernel format (e.g. "
        "int4_sym), as llama.cpp's MXFP4_MOE / Q4_0 files quantise theirs (default: kept bf16)",
    )
    ap.add_argument(
        "--ft-int8",
        action="store_true",
        help="4-bit formats only: ft with --int8-activations (opt-in)",
    )
    ap.add_argument(
        "--ft-gguf",
        action="store_true",
        help="ft loads the same GGUF file llama.cpp runs (its own loader, experts in their GGUF bits "
        "where ft has the kernel: Q4_0, MXFP4, Q8_0, Q4_K, Q5_K, Q6_K, BF16), instead of its converted files",
    )
    ap.add_argument(
        "--gguf",
        default=None,
        metavar="FILE",
        help="run both engines on this GGUF file (any model ft reads) instead of generated files",
    )
    ap.add_argument(
        "--json", default=None, help="also write everything to this file as one JSON object"
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    args.formats = [f for f in args.formats.split(",") if f]
    if bad := [f for f in args.formats if f not in FORMATS]:
        ap.error(f"--formats: unknown {', '.join(bad)} (of {', '.join(FORMATS)})")
    for f in ("q3_k_m", "q5_k_m"):
        if f in args.formats and not args.ft_gguf:
            ap.error(f"--formats {f} needs --ft-gguf (ft runs llama-quantize's file)")
    if args.shape not in SHAPES:
        ap.error(f"--shape {args.shape!r}: mid or deep")
    if args.rounds < 1 or not args.threads or not args.prompt or args.decode < 1 or args.depth < 0:
        ap.error("--rounds, --threads, --prompt and --decode need positive values, --depth >= 0")
    if args.depth % 16:
        ap.error(
            "--depth must be a multiple of 16 (ft's prefix cache reuses whole pages of 16 tokens)"
        )
    from ft_core.paths import cache_dir

    shape = None if args.model else replace(SHAPES[args.shape], vocab=VOCABS[args.vocab])
    if args.work:
        work = Path(args.work).expanduser().resolve()
    elif args.model:
        m = Path(args.model).expanduser().resolve()
        work = (
            cache_dir()
            / "bench_vs_llamacpp"
            / f"{m.name}-{hashlib.sha256(str(m).encode()).hexdigest()[:8]}"
        )
    else:
        work = cache_dir() / "bench_vs_llamacpp" / f"{args.shape}-{args.vocab}"
    stages: dict[str, float] = {}
    t0 = time.perf_counter()
    global _llama_build
    _llama_build = args.isa
    os.environ.update(FT_ISA_ENV[args.isa])  # ft's children inherit them
    llama_dir = ensure_llama_cpp(args.llama_cpp)
    log(f"llama.cpp: {llama_dir}; work dir: {work}")
    if args.gguf:
        g = Path(args.gguf).expanduser().resolve()
        args.formats, shape = [g.name], None
        paths = {g.name: (g, g)}
    else:
        paths = prepare(args, llama_dir, shape, work, stages)
    gguf_info = {fmt: gguf_bytes_per_token(llama_dir, g) for fmt, (_, g) in paths.items()}
    log(f"files ready in {time.perf_counter() - t0:.1f}s")

    import torch

    from ft_core.experts.probe import read_bandwidth

    buf = torch.ones((1 << 30) // 4)
    pairs = []
    for rnd in range(args.rounds):
        for fmt in args.formats:
            ft_path, gguf_path = paths[fmt]
            for n in args.threads:
                bw = [
                    read_bandwidth(buf, threads=n)
                ]  # before ft, after ft (before llama.cpp), after
                opts = []
                if fmt != "bf16":
                    opts += (
                        ["--ft-dense-format", args.ft_dense_format] if args.ft_dense_format else []
                    )
                    opts += ["--ft-int8"] if args.ft_int8 else []
                ft = measure_ft(ft_path, n, args.prompt, args.decode, opts, args.depth)
                bw.append(read_bandwidth(buf, threads=n))
                ll = measure_llama(
                    llama_dir,
                    gguf_path,
                    n,
                    args.prompt,
                    args.decode,
                    gguf_info[fmt]["bytes_per_token"],
                    args.depth,
                )
                bw.append(read_bandwidth(buf, threads=n))
                ft["read_bandwidth_Bps"] = (bw[0] + bw[1]) / 2
                ll["read_bandwidth_Bps"] = (bw[1] + bw[2]) / 2
                pairs.append(
                    {
                        "round": rnd,
                        "format": fmt,
                        "threads": n,
                        "read_bandwidth_samples_Bps": bw,
                        "ft": ft,
                        "llama.cpp": ll,
                    }
                )
                log(
                    f"round {rnd + 1} {fmt} t={n}: read {' / '.join(f'{b / 1e9:.1f}' for b in bw)} GB/s | ft "
                    f"decode {ft['decode_tok_s']:.1f} tok/s ({ft['wall_s']:.0f}s) | llama.cpp decode "
                    f"{ll['decode_tok_s']:.1f} tok/s ({ll['wall_s']:.0f}s)"
                )
    rows = summarize(pairs, args.formats, args.threads, args.prompt)
    desc = shape.describe() if shape else f"--model {args.model or args.gguf}"
    at = f"; after a {args.depth}-token context" if args.depth else ""
    log(
        f"\n{desc}; llama.cpp {pairs[0]['llama.cpp']['build_commit']}; ft {pairs[0]['ft']['isa']}{at}"
    )
    print_table(rows, args.prompt, args.rounds)
    if stages:
        log("stages (s): " + ", ".join(f"{k} {v:.1f}" for k, v in stages.items()))
    if args.json:
        res = {
            "shape": args.shape if shape else None,
            "shape_params": shape.as_dict() if shape else None,
            "vocab": args.vocab if shape else None,
            "model": str(paths[args.formats[0]][0]),
            "work": str(work),
            "llama_cpp": str(llama_dir),
            "formats": {f: [str(p) for p in paths[f]] for f in paths},
            "ft_dense_format": args.ft_dense_format,
            "ft_int8": args.ft_int8,
            "ft_gguf": args.ft_gguf,
            "threads": args.threads,
            "rounds": args.rounds,
            "prompt": args.prompt,
            "decode": args.decode,
            "depth": args.depth,
            "omp_wait_policy": USER_OMP_WAIT_POLICY,
            "stages_s": stages,
            "gguf": gguf_info,
            "summary": rows,
            "pairs": pairs,
        }
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
