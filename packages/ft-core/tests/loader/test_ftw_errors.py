"""FTW failures: damaged directories are named in a CheckpointError, and an interrupted convert never
leaves a directory that loads (atomic: a temporary directory renamed at the end)."""

import io
import json
import os
import subprocess
import sys

import pytest
import torch

from ft_core import CheckpointError, Engine, FTError
from ft_core.loader.ftw_format import INDEX_NAME
from ft_core.loader.ftw_write import convert
from ft_core.loader.progress import Progress

IDS = [5, 17, 99, 3, 250, 41, 7]


@pytest.fixture(scope="module")
def ftw_dir(demo_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("ftw") / "demo.ftw"
    convert(demo_dir, out, shard_bytes=1 << 20)
    return out


@pytest.fixture
def ftw_copy(ftw_dir, tmp_path):
    import shutil

    return shutil.copytree(ftw_dir, tmp_path / "ftw")


def _index(d):
    return json.loads((d / INDEX_NAME).read_text())


def test_corrupt_byte_names_file_and_tensor(ftw_copy):
    t = next(t for t in _index(ftw_copy)["tensors"] if t["kind"] == "bank")
    with open(ftw_copy / t["file"], "r+b") as f:
        f.seek(t["offset"] + t["bytes"] // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))
    with pytest.raises(CheckpointError) as e:
        Engine.from_pretrained(ftw_copy)
    msg = str(e.value)
    assert "checksum mismatch" in msg and t["file"] in msg and repr(t["name"]) in msg


def test_truncated_shard_names_file_and_tensor(ftw_copy):
    idx = _index(ftw_copy)
    last = idx["shards"][-1]["file"]
    t = max((t for t in idx["tensors"] if t["file"] == last), key=lambda t: t["offset"])
    os.truncate(ftw_copy / last, t["offset"] + 10)
    with pytest.raises(
        CheckpointError, match=rf"{last}: truncated FTW shard .*tensor '{t['name']}'"
    ):
        Engine.from_pretrained(ftw_copy)


def test_missing_shard_named(ftw_copy):
    shard = _index(ftw_copy)["shards"][0]["file"]
    (ftw_copy / shard).unlink()
    with pytest.raises(
        CheckpointError, match=rf"{shard}: FTW shard listed in {INDEX_NAME} is missing"
    ):
        Engine.from_pretrained(ftw_copy)


def test_missing_index_named(ftw_copy):
    (ftw_copy / INDEX_NAME).unlink()
    with pytest.raises(CheckpointError, match=rf"{INDEX_NAME}: missing FTW index"):
        Engine.from_pretrained(ftw_copy)


@pytest.mark.parametrize(
    "damage,match",
    [
        (lambda i: i.update(version=99), "FTW version 99 is not supported"),
        (
            lambda i: i["tensors"][0].update(bytes=3),
            r"ftw_index\.json: tensor '\S+': 3 bytes do not match shape",
        ),
        (lambda i: i["bank"].update(num_ids=999), r"experts\.w13 covers 64 of 999 flat ids"),
        (lambda i: i["tensors"].pop(), r"covers \d+ of 64 flat ids|is missing from the checkpoint"),
    ],
)
def test_bad_index_named(ftw_copy, damage, match):
    idx = _index(ftw_copy)
    damage(idx)
    (ftw_copy / INDEX_NAME).write_text(json.dumps(idx))
    with pytest.raises(CheckpointError, match=match):
        Engine.from_pretrained(ftw_copy)


def test_bank_must_match_config(ftw_copy):
    cfg = json.loads((ftw_copy / "config.json").read_text())
    cfg["moe_intermediate_size"] = 64
    (ftw_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="expert bank .* does not match config.json"):
        Engine.from_pretrained(ftw_copy)


def test_convert_argument_errors(demo_dir, ftw_dir, tmp_path):
    with pytest.raises(
        FTError, match="'int3' is not one of auto, bf16, f16, fp8, mxfp4, nvfp4, int4, int4_asym"
    ):
        convert(demo_dir, tmp_path / "x", "int3")
    with pytest.raises(CheckpointError, match="already exists"):
        convert(demo_dir, ftw_dir)
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        convert(tmp_path, tmp_path / "y")
    with pytest.raises(CheckpointError, match="already an FTW directory"):
        convert(ftw_dir, tmp_path / "z")
    assert not (tmp_path / "x").exists()


def test_overwrite_replaces_atomically(demo_dir, tmp_path):
    out = tmp_path / "ftw"
    convert(demo_dir, out, "int4")
    convert(demo_dir, out, overwrite=True)
    assert _index(out)["bank"]["fmt"] == "bf16" and sorted(p.name for p in tmp_path.iterdir()) == [
        "ftw"
    ]


def test_exception_mid_convert_leaves_nothing(demo_dir, tmp_path):
    def boom(done, total):
        if done > total // 2:
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        convert(demo_dir, tmp_path / "ftw", shard_bytes=1 << 18, on_progress=boom)
    assert list(tmp_path.iterdir()) == []


KILL_SCRIPT = """
import os, signal, sys
from ft_core.loader.ftw_write import convert
def die(done, total):
    if done > total // 2:
        os.kill(os.getpid(), signal.SIGKILL)
convert(sys.argv[1], sys.argv[2], shard_bytes=1 << 18, on_progress=die)
"""


def test_killed_convert_never_loads_and_rerun_succeeds(demo_dir, tmp_path):
    out = tmp_path / "ftw"
    res = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(demo_dir), str(out)],
        capture_output=True,
        timeout=300,
    )
    assert res.returncode == -9, res.stderr.decode()
    leftovers = list(tmp_path.glob("ftw.tmp-*"))
    assert not out.exists() and len(leftovers) == 1 and list(leftovers[0].glob("*.ftw"))
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        Engine.from_pretrained(out)
    with pytest.raises(CheckpointError, match="missing FTW index .* interrupted `ft convert`"):
        Engine.from_pretrained(leftovers[0])
    convert(demo_dir, out)  # the re-run removes the dead run's temporary directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ftw"]
    assert torch.equal(
        Engine.from_pretrained(out).score(IDS), Engine.from_pretrained(demo_dir).score(IDS)
    )


def test_progress_bar_draws_on_a_terminal_only():
    s = io.StringIO()
    p = Progress(4 << 20, "loading", enabled=True, stream=s)
    p.update(2 << 20)
    p.update(2 << 20)
    p.close()
    assert "100.0%" in s.getvalue() and "GB/s" in s.getvalue() and s.getvalue().endswith("\n")
    quiet = io.StringIO()  # not a terminal: nothing drawn by default
    Progress(10, "x", stream=quiet).close()
    assert quiet.getvalue() == ""
