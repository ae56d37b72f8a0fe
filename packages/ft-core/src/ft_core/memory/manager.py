"""MemoryManager: the budget after dense weights and runtime buffers, split between KV pages, expert
cache slots and state checkpoint slots, and its resize at a scheduler safe point (between steps).

    mm = engine.memory
    mm.split()                                  # {"kv": bytes, "experts": bytes, "states": bytes, "total": ...}
    mm.resize(total=2 << 30)                    # experts absorb the change first, then KV
    mm.resize(kv=256 << 20, experts=1 << 30)    # explicit parts

Shrinking keeps the most recently used entries that fit (LRU prefix pages, most recently used
experts); growing keeps everything; KV pages held by requests are never dropped: a shrink that
cannot hold them is refused (ResizeRefused says why) and changes nothing, and so is one that leaves
less than ``minimum()``: the KV pool must hold one request of ``max_model_len`` tokens.
"""

from __future__ import annotations

import math
import re
import time

from ft_core.cache.kv_resize import resize_kv
from ft_core.errors import FTError
from ft_core.memory.pools import MemoryPools

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1000**2,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1000**3,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1000**4,
    "tib": 1 << 40,
}


MAX_BYTES = 1 << 53  # 8 PiB: more than any machine holds; every count up to it is exact in a float


class ResizeRefused(FTError):
    """A resize that cannot be applied (it names the pool and the limit); nothing was changed.
    ``field``: the part or argument at fault (None: the request as a whole); ``minimum``: the
    smallest size in bytes that would have been accepted, when a floor refused it."""

    def __init__(self, message: str, field: str | None = None, minimum: int | None = None):
        super().__init__(message)
        self.field, self.minimum = field, minimum


def _shown(v) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def parse_bytes(v, name: str = "size") -> int:
    """Bytes from an int, a float (rounded down) or a string such as "512MiB", "2GB", "1.5g".
    Raises ResizeRefused (``field`` = ``name``) for other types, NaN / infinity, negative sizes
    and sizes over MAX_BYTES."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ResizeRefused(
            f"{name}: expected a byte count or a size such as '512MiB', got "
            f"{type(v).__name__} {_shown(v)}",
            name,
        )
    num, unit = v, 1
    if isinstance(v, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", v)
        if not m or m.group(2).lower() not in _UNITS:
            raise ResizeRefused(
                f"{name}: {_shown(v)} is not a size (e.g. 1073741824, 512MiB, 2GB)", name
            )
        num, unit = float(m.group(1)), _UNITS[m.group(2).lower()]
    if isinstance(num, float) and not math.isfinite(num):
        raise ResizeRefused(f"{name}: {_shown(v)} is not a finite number of bytes", name)
    if num < 0:
        raise ResizeRefused(f"{name}: {_shown(v)} is negative", name)
    if num * unit > MAX_BYTES:
        raise ResizeRefused(
            f"{name}: {_shown(v)} is more than {MAX_BYTES} bytes (8 PiB), more "
            "than any machine has",
            name,
        )
    return int(num * unit)


class MemoryManager:
    """Sizes and resizes ``pools`` (built by the engine; see ``memory/pools.py``)."""

    def __init__(self, pools: MemoryPools):
        self.pools = pools
        self.history: list[dict] = []  # the last 64 resizes
        self.count = 0  # resizes applied since start

    # ---- sizes --------------------------------------------------------------------------------
    @property
    def page_bytes(self) -> int:
        return self.pools.page_bytes

    @property
    def _experts(self):
        return self.pools.experts

    @property
    def slot_bytes(self) -> int:
        return self.pools.slot_bytes

    @property
    def _states(self):
        return self.pools.states  # recurrent-state checkpoints (hybrid models)

    def split(self) -> dict:
        """Current bytes per pool and their counts."""
        e, ex, st = self.pools, self._experts, self._states
        kv = e.kv.num_pages * self.page_bytes
        experts = ex.cache.num_slots * self.slot_bytes if ex else 0
        states = st.nbytes if st is not None else 0
        return {
            "total": kv + experts + states,
            "kv": kv,
            "experts": experts,
            "states": states,
            "kv_pages": e.kv.num_pages,
            "page_bytes": self.page_bytes,
            "kv_pages_in_use": self._pages_in_use(),
            "expert_slots": ex.cache.num_slots if ex else 0,
            "slot_bytes": self.slot_bytes,
            "state_slots": st.num_slots if st is not None else 0,
        }

    @property
    def min_kv_pages(self) -> int:
        """Pages one request of ``max_model_len`` tokens needs: a smaller pool fails every long
        request (0 when pages hold no bytes: every layer keeps state)."""
        e = self.pools
        return -(-e.max_model_len // e.kv.page_size) if self.page_bytes else 0

    def minimum(self) -> dict:
        """The smallest bytes per pool a resize may leave: one request of ``max_model_len`` in the
        KV pool, one expert slot (when there is an expert cache), no state checkpoint."""
        return {
            "kv": self.min_kv_pages * self.page_bytes,
            "experts": self.slot_bytes if self._experts else 0,
            "states": 0,
        }

    @property
    def min_total(self) -> int:
        """The smallest ``total`` a resize may ask for now (``total`` leaves states as they are)."""
        m = self.minimum()
        return m["kv"] + m["experts"] + self.split()["states"]

    def _pages_in_use(self) -> int:
        return len({p for t in self.pools.kv.tables.values() for p in t})

    # ---- resize -------------------------------------------------------------------------------
    def plan(self, total=None, kv=None, experts=None, states=None) -> dict[str, int]:
        """Target bytes per pool. Unnamed parts keep their size, except that with ``total`` the expert
        cache absorbs the difference first (down to one slot, up to every expert), then the KV pool."""
        cur = self.split()
        want = {
            k: (parse_bytes(v, k) if v is not None else None)
            for k, v in {"total": total, "kv": kv, "experts": experts, "states": states}.items()
        }
        out = {k: want[k] if want[k] is not None else cur[k] for k in ("kv", "experts", "states")}
        if want["total"] is None:
            return out
        fixed = {k for k in ("kv", "experts", "states") if want[k] is not None}
        over = sum(out.values()) - want["total"]
        ex = self._experts
        ceiling = {"experts": ex.cache.bank.num_ids * self.slot_bytes if ex else 0, "kv": None}
        floors = self.minimum()
        for part, floor in (("experts", floors["experts"]), ("kv", floors["kv"])):
            if part in fixed or over == 0 or (part == "experts" and not ex):
                continue
            if over > 0:  # shrink this part down to its floor
                take = min(over, max(0, out[part] - floor))
            else:  # grow it up to its ceiling (every expert resident)
                room = -over if ceiling[part] is None else max(0, ceiling[part] - out[part])
                take = -min(-over, room)
            out[part] -= take
            over -= take
        if over > 0:
            least = sum(out[k] if k in fixed or k == "states" else floors[k] for k in out)
            raise ResizeRefused(
                f"total={want['total']} bytes cannot hold kv={out['kv']} + "
                f"experts={out['experts']} + states={out['states']} bytes; the "
                f"smallest total is {least} bytes ({self._kv_floor_text()})",
                "total",
                least,
            )
        return out

    def _kv_floor_text(self) -> str:
        e = self.pools
        return (
            f"the KV pool holds at least one request of max_model_len={e.max_model_len} "
            f"tokens: {self.min_kv_pages} pages of {self.page_bytes} bytes"
        )

    def resize(
        self, total=None, kv=None, experts=None, states=None, reason: str = "request"
    ) -> dict:
        """Apply a new split now (call between engine steps). Returns the history record."""
        before = self.split()
        target = self.plan(total, kv, experts, states)
        # a model whose every layer keeps state has pages of 0 bytes: their number is not a memory matter
        pages = target["kv"] // self.page_bytes if self.page_bytes else before["kv_pages"]
        ex = self._experts
        slots = target["experts"] // self.slot_bytes if ex else 0
        if target["experts"] and not ex:
            raise ResizeRefused(
                "experts: this engine has no expert cache (moe_backend 'cpu' or a dense model); "
                "start it with a cache policy (fill, hybrid, static) to size one",
                "experts",
            )
        if ex and slots < 1:
            raise ResizeRefused(
                f"experts={target['experts']} bytes holds no expert slot "
                f"({self.slot_bytes} bytes each)",
                "experts",
                self.slot_bytes,
            )
        st = self._states
        if target["states"] and st is None:
            raise ResizeRefused("states: this model keeps no recurrent-state checkpoints", "states")
        need = self._pages_in_use()
        if pages < need:
            raise ResizeRefused(
                f"kv={target['kv']} bytes is {pages} pages but running requests hold {need} pages "
                f"({need * self.page_bytes} bytes): wait for them to finish or "
                "shrink less",
                "kv",
                need * self.page_bytes,
            )
        if pages < self.min_kv_pages:
            least = self.min_kv_pages * self.page_bytes
            raise ResizeRefused(
                f"kv={target['kv']} bytes is {pages} pages, below the minimum "
                f"of {least} bytes ({self._kv_floor_text()})",
                "kv",
                least,
            )
        t0 = time.perf_counter()
        p = self.pools
        kv_out = resize_kv(p.kv, p.prefix, st, pages) if pages != before["kv_pages"] else {}
        ex_out = ex.resize(slots) if ex and slots != before["expert_slots"] else {}
        st_out = (
            st.resize(target["states"])
            if st is not None and target["states"] != before["states"]
            else {}
        )
        rec = {
            "time": time.time(),
            "reason": reason,
            "before": before,
            "after": self.split(),
            "kv": kv_out,
            "experts": ex_out,
            "states": st_out,
            "seconds": time.perf_counter() - t0,
        }
        self.history.append(rec)
        self.count += 1
        del self.history[:-64]
        return rec
