"""The polled-flag kernels (ft_kernels.gpu.host_flag) under Triton's interpreter against their twins:
raise_flag counts the device's sequence up and writes it to the flag; wait_flag returns once another
thread (the CPU branch's poller) has set done to the sequence, and not before; bad words are refused."""

import os
import subprocess
import sys

CODE = r"""
import threading, time
import torch
from ft_kernels.gpu import host_flag
pairs = ((host_flag.raise_flag, host_flag.wait_flag),
         (host_flag.raise_flag_reference, host_flag.wait_flag_reference))
for raise_flag, wait_flag in pairs:
    seq = torch.tensor([7], dtype=torch.int32)
    flag = torch.zeros(1, dtype=torch.int32)
    for want in (8, 9, 10):
        raise_flag(seq, flag)
        assert int(seq[0]) == int(flag[0]) == want, (raise_flag, seq, flag)
    done = torch.tensor([9], dtype=torch.int32)
    answered = []
    def answer():
        time.sleep(0.2)
        answered.append(time.monotonic())
        done[0] = 10
    t = threading.Thread(target=answer)
    t.start()
    wait_flag(seq, done)
    back = time.monotonic()
    t.join()
    assert answered and back >= answered[0], (wait_flag, answered, back)
for call, args, msg in ((host_flag.raise_flag, (torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int32)), "seq must be int32"),
                        (host_flag.wait_flag, (torch.zeros(1, dtype=torch.int32), torch.zeros(0, dtype=torch.int32)), "done must be int32")):
    try:
        call(*args)
        raise SystemExit(f"{msg}: not refused")
    except ValueError as e:
        assert msg in str(e), e
print("ok")
"""


def test_host_flag_kernels_match_twins_under_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run(
        [sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]
