"""ft_kernels.HostBranch: the CPU share of a device's MoE layer step, run from its buffers by C++ (directly,
through its host-function address, or by its polling thread). Its y is ``moe_experts`` on the routes whose
slot is < 0, bit for bit (the same kernel on the same routes in the same order), which is within the fp32
bound of the float64 result (``fp32_bounds.moe_bound``, as in test_moe_experts); its counters add up the
step's routes and the control step's counts; errors are kept and raised by ``check``, y zeroed."""

import ctypes
import threading
import time

import ft_kernels as fk
import pytest
import torch
from fp32_bounds import moe_bound
from ft_kernels.host_branch import STATS

E, LAYERS = 4, 3


def _io(T, H, R, xdtype, seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "route_slot": torch.randint(-1, 3, (R,), generator=g, dtype=torch.int64),
        "counts": torch.randint(0, 9, (4,), generator=g, dtype=torch.int32),
        "x": torch.randn(T, H, generator=g).to(xdtype),
        "tok": torch.randint(0, T, (R,), generator=g, dtype=torch.int64),
        # one MoE layer's routes a step (flat ids layer * E + e)
        "eid": int(torch.randint(0, LAYERS, (1,), generator=g)) * E
        + torch.randint(0, E, (R,), generator=g, dtype=torch.int64),
        "gate": torch.rand(R, generator=g),
        "y": torch.full((T, H), float("nan")),
    }


def _bank(fmt, H, I, seed=0):
    g = torch.Generator().manual_seed(seed)
    w13 = fk.quantize(torch.randn(E * LAYERS, 2 * I, H, generator=g) * 0.1, fmt)
    w2 = fk.quantize(torch.randn(E * LAYERS, H, I, generator=g) * 0.1, fmt)
    return w13, w2


def _expected(io, w13, w2):
    off = io["route_slot"] < 0
    args = (io["x"], io["tok"][off].int(), io["eid"][off].int(), io["gate"][off], w13, w2)
    return fk.moe_experts(*args), args


@pytest.mark.parametrize("how", ["run", "address", "poll"])
@pytest.mark.parametrize("xdtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fmt", ["bf16", "mxfp4", "q4_k"])
def test_branch_is_moe_experts_on_the_cpu_routes(fmt, xdtype, how):
    H, I = (256, 256) if fmt == "q4_k" else (96, 64)
    w13, w2 = _bank(fmt, H, I)
    io = _io(3, H, 12, xdtype, seed=1)
    b = fk.HostBranch(w13, w2, io, experts=E, layers=LAYERS)
    flag, done = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    if how == "poll":
        b.start_polling(flag, done)
    for step in range(3):  # the device refills the same buffers each step
        new = _io(3, H, 12, xdtype, seed=10 + step)
        for k in ("route_slot", "counts", "x", "tok", "eid", "gate"):
            io[k].copy_(new[k])
        if how == "run":
            b.run()
        elif how == "address":  # what cudaLaunchHostFunc calls
            ctypes.CFUNCTYPE(None, ctypes.c_void_p)(b.call_address())(b.address())
        else:
            flag[0] = step + 1
            t0 = time.monotonic()
            while int(done[0]) != step + 1:
                assert time.monotonic() - t0 < 10, "the polling thread did not answer"
                time.sleep(1e-4)
        want, args = _expected(io, w13, w2)
        assert torch.equal(io["y"], want), (fmt, how, step)
        exact, bound = moe_bound(*args)
        assert ((io["y"].double() - exact).abs() <= bound).all()
    if how == "poll":
        b.stop_polling()
    b.check()
    assert b.runs() == 3


def test_no_cpu_routes_give_zeros_and_counters_add_up():
    w13, w2 = _bank("bf16", 96, 64)
    io = _io(2, 96, 8, torch.float32, seed=2)
    b = fk.HostBranch(w13, w2, io, experts=E, layers=LAYERS)
    want = torch.zeros(LAYERS, len(STATS), dtype=torch.int64)
    for step, slots in enumerate((torch.arange(8), torch.full((8,), -1), torch.arange(8) % 3 - 1)):
        io["route_slot"].copy_(slots)
        io["eid"].copy_(step * E + torch.arange(8) % E)  # layer `step`
        b.run()
        if step == 0:
            assert torch.equal(io["y"], torch.zeros(2, 96))
        c = io["counts"].long()
        want[step, :7] += torch.tensor(
            [1, 8, int((slots < 0).sum()), int(c[1]), int(c[2]), int(c[0]), int(c[3])]
        )
    assert torch.equal(b.stats[:, :7], want[:, :7]), b.stats
    assert (b.stats[:, STATS.index("cpu_us")] >= 0).all()


def test_an_error_is_kept_and_raised_by_check():
    """A route of an expert past the bank: the kernel's error is kept (the run itself never raises, as
    a host function may not), y is zeroed, and ``check`` names it."""
    w13, w2 = _bank("bf16", 96, 64)
    io = _io(2, 96, 4, torch.float32, seed=3)
    io["route_slot"].fill_(-1)
    io["eid"][1] = E * LAYERS + 5
    b = fk.HostBranch(w13, w2, io, experts=E, layers=LAYERS)
    b.run()
    assert torch.equal(io["y"], torch.zeros(2, 96))
    with pytest.raises(RuntimeError, match="CPU branch failed: .*eid"):
        b.check()


def test_polling_runs_beside_other_callers_of_the_pool():
    """The polling thread's steps share the kernel pool with another thread's moe_experts calls (one job
    at a time): both stay exact."""
    w13, w2 = _bank("bf16", 96, 64)
    io = _io(4, 96, 16, torch.float32, seed=4)
    io["route_slot"].fill_(-1)
    b = fk.HostBranch(w13, w2, io, experts=E, layers=LAYERS)
    flag, done = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    b.start_polling(flag, done)
    want, args = _expected(io, w13, w2)
    bad = []

    def other():
        for _ in range(50):
            if not torch.equal(fk.moe_experts(*args), want):
                bad.append(1)

    t = threading.Thread(target=other)
    t.start()
    for step in range(1, 51):
        flag[0] = step
        while int(done[0]) != step:
            time.sleep(1e-5)
        if not torch.equal(io["y"], want):
            bad.append(step)
    t.join()
    b.stop_polling()
    assert not bad and b.runs() == 50


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("tok", torch.zeros(5, dtype=torch.int32), "tok must be int64"),
        ("gate", torch.zeros(3), "gate must be float32 \\[R\\]"),
        ("counts", torch.zeros(3, dtype=torch.int32), "counts must be int32 \\[4\\]"),
        ("y", torch.zeros(2, 5), "y must be float32 \\[T, H\\]"),
    ],
)
def test_bad_buffers_raise_naming_them(key, value, match):
    w13, w2 = _bank("bf16", 96, 64)
    io = _io(2, 96, 4, torch.float32, seed=5)
    io[key] = value
    with pytest.raises(ValueError, match=match):
        fk.HostBranch(w13, w2, io, experts=E, layers=LAYERS)


def test_a_flag_raised_right_after_start_is_answered():
    """The polling thread takes the flag's value at start_polling as answered, not its value whenever the
    thread happens to start: a step raised at once is not lost (it was, when the thread read it)."""
    w13, w2 = _bank("bf16", 96, 64)
    io = _io(2, 96, 4, torch.float32, seed=6)
    for i in range(20):
        b = fk.HostBranch(w13, w2, io, experts=E, layers=LAYERS)
        flag = torch.full((1,), i, dtype=torch.int32)
        done = torch.full((1,), i, dtype=torch.int32)
        b.start_polling(flag, done)
        flag[0] = i + 1
        t0 = time.monotonic()
        while int(done[0]) != i + 1:
            assert time.monotonic() - t0 < 10, f"a flag raised right after start was lost ({i})"
            time.sleep(1e-4)
        b.stop_polling()
