"""The Triton slot-copy kernel (Triton's interpreter on the CPU) against its torch twin: every bank
row of the first count[0] list entries lands in its slot, bit for bit, and nothing else changes --
rows moved as 32-bit words and as bytes (row bytes not a multiple of 4), rows longer than one
program's chunk, an empty list, a full one, and a list longer than its count."""

import os
import subprocess
import sys

CODE = r"""
import torch
from ft_kernels.gpu import slot_copy
from ft_kernels.gpu.slot_copy import copy_rows, copy_rows_reference
slot_copy.CHUNK, slot_copy.BLOCK = 64, 16  # several programs a row even on small rows
g = torch.Generator().manual_seed(0)
cases = 0
for dtype, row in ((torch.bfloat16, (6, 10)), (torch.uint8, (3, 7)), (torch.float32, (45,)), (torch.int64, (2, 3))):
    for N, S, Q, n in ((9, 4, 3, 3), (9, 4, 4, 2), (5, 5, 5, 0), (12, 6, 8, 6)):
        src = (torch.randn(N, *row, generator=g) * 100).to(dtype)
        dst = (torch.randn(S, *row, generator=g) * 100).to(dtype)
        ids = torch.randperm(N, generator=g)[:Q]
        slots = torch.randperm(S, generator=g)[:Q]
        count = torch.tensor([n, 7, 7, 7], dtype=torch.int32)
        want = dst.clone()
        copy_rows_reference(src, want, ids, slots, count)
        copy_rows(src, dst, ids, slots, count)
        assert torch.equal(dst.view(torch.uint8), want.view(torch.uint8)), (dtype, row, N, S, Q, n)
        cases += 1
try:
    copy_rows(torch.zeros(3, 4), torch.zeros(2, 5), torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64), torch.ones(1, dtype=torch.int32))
    raise SystemExit("a row shape mismatch was not refused")
except ValueError as e:
    assert "do not match" in str(e)
print("ok", cases)
"""


def test_slot_copy_matches_twin_under_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run(
        [sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]
