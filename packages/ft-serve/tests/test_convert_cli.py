"""`ft convert` as a user runs it: a real subprocess on the demo model; the FTW directory then serves the
same completions; bad options exit 1 with a message, not a traceback."""

import json
import os
import subprocess
import sys

import pytest

from ft_core.demo import write_demo_model


def ft(*args):
    return subprocess.run(
        [sys.executable, "-m", "ft_serve.cli", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return write_demo_model(tmp_path_factory.mktemp("demo") / "demo")


def test_convert_then_generate_gives_the_same_text(demo, tmp_path):
    out = tmp_path / "demo.ftw"
    res = ft("convert", "--model", str(demo), "--out", str(out), "--shard-size", "256KiB")
    assert res.returncode == 0, res.stderr
    assert f"wrote {out}" in res.stdout and "experts bf16" in res.stdout
    index = json.loads((out / "ftw_index.json").read_text())
    assert len(index["shards"]) > 1 and all(s["bytes"] <= 256 << 10 for s in index["shards"])
    a = ft("generate", "--model", str(demo), "--max-tokens", "12", "the model")
    b = ft("generate", "--model", str(out), "--max-tokens", "12", "the model")
    assert b.returncode == 0, b.stderr
    assert a.stdout == b.stdout and a.stdout.strip()


def test_convert_quantised_format_runs(demo, tmp_path):
    out = tmp_path / "q.ftw"
    res = ft("convert", "--model", str(demo), "--out", str(out), "--format", "int4")
    assert res.returncode == 0, res.stderr
    assert "experts int4_sym" in res.stdout
    gen = ft("generate", "--model", str(out), "--max-tokens", "4", "hello")
    assert gen.returncode == 0, gen.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--format", "int3"],
            "'int3' is not one of auto, bf16, f16, fp8, mxfp4, nvfp4, int4, int4_asym",
        ),
        (["--shard-size", "lots"], "--shard-size: 'lots' is not a size"),
        (["--shard-size", "100"], "below the 4096-byte alignment"),
    ],
)
def test_convert_errors_exit_1_with_message(demo, tmp_path, args, message):
    res = ft("convert", "--model", str(demo), "--out", str(tmp_path / "x"), *args)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith("ft convert: error:") and message in res.stderr
    assert not (tmp_path / "x").exists()


def test_convert_refuses_existing_output_unless_overwrite(demo, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    res = ft("convert", "--model", str(demo), "--out", str(out))
    assert res.returncode == 1 and "already exists (pass --overwrite" in res.stderr
    res = ft("convert", "--model", str(demo), "--out", str(out), "--overwrite")
    assert res.returncode == 0, res.stderr
    assert (out / "ftw_index.json").is_file()


def test_help_lists_convert_options():
    res = ft("convert", "--help")
    for opt in ["--model", "--out", "--format", "--shard-size", "--overwrite", "nvfp4", "int4"]:
        assert opt in res.stdout
