"""A CPU KV pool (``cache/kv_cache.py``: ``lazy_zeros``) is zero everywhere but resident only where written: its
pages come from one anonymous mapping per pool, which the OS fills with zeros on first touch. Measured in a
fresh process by VmRSS: a 256 MiB pool (4 layers, K and V) adds well under 16 MiB when made, about the bytes of
the pages written after, and a rebuilt (compacted) pool the same."""

import json
import subprocess
import sys

import torch
from ft_core.cache.kv_cache import KVLayout, PagedKVCache, lazy_zeros

_CHILD = r"""
import json, torch
from ft_core.cache.kv_cache import KVLayout, PagedKVCache

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

torch.zeros(1)
base = rss()
lay = KVLayout(num_pages=2048, page_size=16, kv_heads=4, k_dim=128, v_dim=128, dtype=torch.bfloat16)
kv = PagedKVCache([lay] * 4)  # 4 x 2 x 16 MiB x 2 = 256 MiB
made = rss()
for layer in range(4):
    kv.k[layer][:64] = 1.0  # 64 pages of K a layer: 4 x 64 x 16 KiB = 4 MiB
written = rss()
zero = all(not kv.k[l][64:].any() and not kv.v[l].any() for l in range(4))
kv.refs[:64] = [1] * 64
kv.compact(1024)
print(json.dumps({"made": made - base, "written": written - made, "zero": zero,
                  "kept": all(bool((kv.k[l][:64] == 1).all()) and not kv.k[l][64:].any() for l in range(4))}))
"""


def test_pool_is_resident_only_where_written():
    res = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    mib = 1 << 20
    assert out["made"] < 16 * mib, out
    assert 3 * mib <= out["written"] < 12 * mib, out
    assert out["zero"] and out["kept"], out


def test_lazy_zeros_shapes_and_dtypes():
    for shape, dt in (((3, 5, 7), torch.bfloat16), ((0, 4), torch.float32), ((2, 3), torch.int64)):
        t = lazy_zeros(shape, dt, "cpu")
        assert t.shape == shape and t.dtype == dt and t.is_contiguous() and not t.any()
    lay = KVLayout(num_pages=4, page_size=2, kv_heads=1, k_dim=8, v_dim=0, dtype=torch.float32)
    kv = PagedKVCache([lay])
    assert kv.v == [None] and kv.k[0].shape == (4, 2, 1, 8) and not kv.k[0].any()
