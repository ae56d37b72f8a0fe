"""The CPU instruction sets this machine can run the kernels with (for FT_CPU_ISA-forced subprocess tests)."""

import os


def available_isas() -> list[str]:
    """ "scalar", then "avx2", "avx512" and "avx512bf16" when /proc/cpuinfo lists their flags."""
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""  # noqa: SIM115
    have = ["scalar"]
    if " avx2" in flags and " fma" in flags and " f16c" in flags:
        have.append("avx2")
    if all(f" {f}" in flags for f in ("avx512f", "avx512bw", "avx512vl")):
        have.append("avx512")
        if " avx512_bf16" in flags:
            have.append("avx512bf16")
    return have
