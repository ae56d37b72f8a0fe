"""``--elastic auto``: poll the device's free memory and resize the engine's budget through the engine
thread (ft_core.memory.ElasticPolicy decides; hysteresis keeps it from thrashing)."""

from __future__ import annotations

import asyncio
import logging

from ft_core.errors import FTError
from ft_core.memory import ElasticPolicy, file_source, torch_cuda_source

log = logging.getLogger("ft.serve")


def make_source(spec: str, device: str):
    """``cuda`` (the engine's device) or ``file:PATH`` (a byte count in a file: a simulated device)."""
    if spec.startswith("file:"):
        return file_source(spec[5:])
    if spec == "cuda":
        if not device.startswith("cuda"):
            raise FTError(
                "--elastic auto reads free memory from the GPU, and this engine runs on "
                f"{device!r}; use --elastic-source file:PATH to simulate one"
            )
        return torch_cuda_source(device)
    raise FTError(f"--elastic-source {spec!r}: expected 'cuda' or 'file:PATH'")


class ElasticLoop:
    def __init__(self, loop, config):
        self.loop, self.config = loop, config
        self.policy: ElasticPolicy | None = None
        self.source = None
        self.last_free: int | None = None
        self.errors = 0
        if config.elastic == "auto":
            self.source = make_source(config.elastic_source, loop.engine.config.device)
            total = loop.engine.memory.split()["total"]
            self.policy = ElasticPolicy(
                max_total=total,
                reserve=config.elastic_reserve,
                min_total=loop.engine.memory.min_total,
            )
        elif config.elastic != "off":
            raise FTError(f"--elastic {config.elastic!r}: expected off or auto")

    def start(self):
        return asyncio.get_running_loop().create_task(self._run()) if self.policy else None

    def view(self) -> dict:
        if self.policy is None:
            return {"mode": "off"}
        p = self.policy
        return {
            "mode": "auto",
            "source": self.config.elastic_source,
            "reserve": p.reserve,
            "max_total": p.max_total,
            "last_free": self.last_free,
            "errors": self.errors,
        }

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.config.elastic_interval)
            try:
                self.last_free = free = self.source()
                total = await self.loop.call(lambda eng: eng.memory.split()["total"])
                new = self.policy.decide(free, total)
                if new is not None:
                    rec = await self.loop.call(
                        lambda eng: eng.memory.resize(total=new, reason=f"auto: {free} bytes free")
                    )
                    log.info(
                        "elastic: total %d -> %d bytes (%s)",
                        total,
                        rec["after"]["total"],
                        rec["reason"],
                    )
            except asyncio.CancelledError:
                raise
            except (
                Exception
            ) as e:  # a refused shrink or an unreadable source: keep serving, try again
                self.errors += 1
                log.warning("elastic: %s", e)
