"""The device interface's ordering contract (device/streams.py) on its CPU stand-in: what the
expert hierarchy's orchestration relies on, checked under random copy-stream delays."""

import threading

import pytest

from ft_core.device import CpuDevice, done, for_name


@pytest.mark.parametrize("seed", range(5))
def test_a_stream_runs_its_work_in_order(seed):
    dev = CpuDevice(delay=0.002, seed=seed)
    seen = []
    evs = [dev.copy.run(lambda i=i: seen.append(i) or i) for i in range(20)]
    assert [e.result() for e in evs] == list(range(20))
    assert seen == list(range(20))
    dev.close()


@pytest.mark.parametrize("seed", range(5))
def test_wait_orders_work_across_streams(seed):
    """Work queued on compute after ``wait(ev)`` sees what the copy before ``ev`` wrote, however
    late the copy runs; work queued before the wait is not held back by it."""
    dev = CpuDevice(delay=0.005, seed=seed)
    slots = [0] * 8
    gate = threading.Event()
    for i in range(8):
        ev = dev.copy.run(lambda i=i: slots.__setitem__(i, i + 1))
        dev.compute.wait(ev)
        got = dev.compute.run(lambda i=i: slots[i])
        assert got.result() == i + 1
    blocker = dev.copy.run(gate.wait)  # a copy that has not finished
    free = dev.compute.run(lambda: "ran")  # queued before any wait for it
    assert free.result() == "ran"
    dev.compute.wait(blocker)
    held = dev.compute.run(lambda: "after")
    assert not held._done.wait(0.05)  # held until the copy is done
    gate.set()
    assert held.result() == "after"
    dev.close()


def test_an_error_surfaces_on_synchronize_and_fails_later_work():
    dev = CpuDevice()

    def boom():
        raise RuntimeError("copy failed")

    bad = dev.copy.run(boom)
    later = dev.copy.run(lambda: 1)
    with pytest.raises(RuntimeError, match="copy failed"):
        bad.synchronize()
    with pytest.raises(RuntimeError, match="copy failed"):
        later.synchronize()
    dev.compute.wait(bad)  # a stream waiting on a failed event fails too
    with pytest.raises(RuntimeError, match="copy failed"):
        dev.compute.run(lambda: 2).synchronize()
    dev.close()


def test_synchronize_waits_for_every_stream():
    dev = CpuDevice(delay=0.01, seed=3)
    out = []
    for i in range(5):
        dev.copy.run(lambda i=i: out.append(i))
    dev.synchronize()
    assert out == list(range(5))
    assert done(7).result() == 7
    dev.close()


def test_device_names():
    assert for_name("cpu").name == "cpu"
    with pytest.raises(ValueError, match="not one of cpu, cuda"):
        for_name("tpu")
    free, total = CpuDevice().mem_get_info()
    assert 0 < free <= total
    assert CpuDevice(memory=(5, 9)).mem_get_info() == (5, 9)


def test_to_host_values_only_after_synchronize_and_join_waits():
    """to_host's copies are handed out only after the event is synchronized (on a GPU they are not
    there before: the stand-in refuses, so a caller that forgets fails in CI); join makes the caller
    wait for a stream's work (the stand-in: the host waits)."""

    import torch

    dev = CpuDevice(delay=0.01, seed=3)
    x = torch.arange(4)
    ev = dev.to_host([x, x + 1])
    with pytest.raises(RuntimeError, match="before the event was synchronized"):
        ev.result()
    ev.synchronize()
    a, b = ev.result()
    assert torch.equal(a, x) and torch.equal(b, x + 1)
    ran = threading.Event()
    pending = dev.compute.run(lambda: ran.wait(0) or ran.set())
    dev.join(pending)
    assert ran.is_set()
    dev.close()
