"""The `ft` command as a user runs it: a real subprocess, the demo model, clear errors and exit codes."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from ft_core.demo import write_demo_model


def ft(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "ft_serve.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return write_demo_model(tmp_path_factory.mktemp("demo") / "demo")


def test_generate_without_model_uses_demo_in_cache(tmp_path):
    res = ft("generate", "--max-tokens", "8", "hello world", env={"FT_CACHE_DIR": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip()
    assert (tmp_path / "ft-demo-qwen3-moe-v1" / "config.json").is_file()


def test_generate_is_deterministic_with_seed(demo):
    a = ft(
        "generate",
        "--model",
        str(demo),
        "--max-tokens",
        "10",
        "--temperature",
        "1",
        "--seed",
        "3",
        "the model",
    )
    b = ft(
        "generate",
        "--model",
        str(demo),
        "--max-tokens",
        "10",
        "--temperature",
        "1",
        "--seed",
        "3",
        "the model",
    )
    assert a.returncode == 0 and a.stdout == b.stdout


def test_chat_flag_uses_template(demo):
    res = ft("generate", "--model", str(demo), "--max-tokens", "4", "--chat", "hi")
    assert res.returncode == 0, res.stderr


def test_expert_cache_flags_keep_the_output(demo):
    plain = ft("generate", "--model", str(demo), "--max-tokens", "10", "the model")
    cached = ft(
        "generate",
        "--model",
        str(demo),
        "--max-tokens",
        "10",
        "--moe-backend",
        "hybrid",
        "--moe-bandwidth-ratio",
        "0.5",
        "--moe-cache-fraction",
        "0.2",
        "the model",
    )
    assert cached.returncode == 0, cached.stderr
    assert cached.stdout == plain.stdout


def test_help_lists_options():
    res = ft("generate", "--help")
    for opt in ["--model", "--max-tokens", "--temperature", "--seed", "PROMPT"]:
        assert opt in res.stdout


@pytest.mark.parametrize(
    "damage", ["missing_dir", "unknown_arch", "truncated", "bad_dtype_request"]
)
def test_errors_exit_nonzero_with_message_not_traceback(demo, tmp_path, damage):
    model = tmp_path / "ckpt"
    shutil.copytree(demo, model)
    extra = []
    if damage == "missing_dir":
        model = tmp_path / "absent"
    elif damage == "unknown_arch":
        cfg = json.loads((model / "config.json").read_text())
        cfg["model_type"] = "nope"
        (model / "config.json").write_text(json.dumps(cfg))
    elif damage == "truncated":
        f = model / "model.safetensors"
        f.write_bytes(f.read_bytes()[:1000])
    else:
        extra = ["--top-p", "0"]
    res = ft("generate", "--model", str(model), *extra, "hi")
    assert res.returncode == 1, res.stderr
    assert res.stderr.startswith("ft generate: error: ")
    assert "Traceback" not in res.stderr


def test_probe_reports_host_bandwidth_and_caches_it(tmp_path):
    env = {"FT_CACHE_DIR": str(tmp_path)}
    first = ft("probe", env=env)
    assert first.returncode == 0, first.stderr
    assert (
        "B_H  CPU expert kernel (bf16):" in first.stdout
        and "does not apply (no accelerator)" in first.stdout
    )
    gbs = float(first.stdout.split("(bf16):")[1].split("GB/s")[0])
    assert gbs > 0
    assert (tmp_path / "probe.json").is_file()
    again = ft("probe", env=env)
    assert "(cached)" in again.stdout
    bad = ft("probe", "--format", "fp3", env=env)
    assert bad.returncode == 1 and "fp3" in bad.stderr


def test_window_state_flags_keep_the_output(tmp_path):
    """GPT-OSS windows as state (auto / on) or as paged KV (off): the same greedy text; bad slot counts
    are refused with the option named."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests"))
    import tiny_checkpoints

    model = str(tiny_checkpoints.make_checkpoint("gpt_oss", tmp_path / "gpt_oss"))
    args = (
        "generate",
        "--model",
        model,
        "--max-tokens",
        "24",
        "--temperature",
        "0",
        "a long enough prompt for the window",
    )
    runs = [
        ft(*args),
        ft(*args, "--window-state", "on", "--state-slots", "2"),
        ft(*args, "--window-state", "off"),
    ]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    assert runs[0].stdout == runs[1].stdout == runs[2].stdout and runs[0].stdout.strip()
    bad = ft(*args, "--state-slots", "0")
    assert bad.returncode != 0 and "state_slots" in bad.stderr and "Traceback" not in bad.stderr


def test_linear_attn_impl_reaches_the_engine(tmp_path):
    """--linear-attn-impl fla without flash-linear-attention (hidden by a stub package that fails to
    import): a one-line error naming the package and how to install it, no traceback."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests"))
    import tiny_checkpoints

    model = str(tiny_checkpoints.make_checkpoint("qwen3_next", tmp_path / "qwen3_next"))
    (tmp_path / "stub" / "fla").mkdir(parents=True)
    (tmp_path / "stub" / "fla" / "__init__.py").write_text(
        "raise ImportError('hidden by the test')\n"
    )
    args = ("generate", "--model", model, "--max-tokens", "2", "--temperature", "0", "hi")
    res = ft(*args, "--linear-attn-impl", "fla", env={"PYTHONPATH": str(tmp_path / "stub")})
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "flash-linear-attention" in res.stderr and "pip install" in res.stderr, res.stderr
    assert ft(*args, "--linear-attn-impl", "torch").returncode == 0


def test_engine_flags_are_derived_from_engine_config():
    """Every EngineConfig field has its flag (ft_core.config.options), and the parsed flags map back to the
    fields: sizes parsed, tri-state bools, flipped defaults, choices refused by argparse."""
    import dataclasses

    from ft_core.config import EngineConfig
    from ft_serve.cli import build_parser
    from ft_serve.cli_args import engine_kwargs

    p = build_parser()
    kw = engine_kwargs(p.parse_args(["generate", "hi"]))
    defaults = EngineConfig(model="m")
    assert set(kw) == {f.name for f in dataclasses.fields(EngineConfig)} - {
        "kv_cache_bytes",
        "state_checkpoint_bytes",
        "moe_cache_bytes",
    }
    for name, v in kw.items():
        assert name == "model" and v is None or v == getattr(defaults, name), name
    kw = engine_kwargs(
        p.parse_args(
            [
                "generate",
                "hi",
                "--kv-cache-size",
                "2GiB",
                "--no-prefix-cache",
                "--window-state",
                "off",
                "--page-size",
                "32",
                "--moe-cache-fraction",
                "0.25",
                "--dense-format",
                "mxfp4",
                "--no-moe-prefill-overlap",
                "--int8-activations",
            ]
        )
    )
    assert (kw["kv_cache_bytes"], kw["prefix_cache"], kw["window_state"], kw["page_size"]) == (
        2 << 30,
        False,
        False,
        32,
    )
    assert (
        kw["moe_cache_fraction"],
        kw["dense_format"],
        kw["moe_prefill_overlap"],
        kw["int8_activations"],
    ) == (0.25, "mxfp4", False, True)
    with pytest.raises(SystemExit):
        p.parse_args(["generate", "hi", "--moe-backend", "lru"])
