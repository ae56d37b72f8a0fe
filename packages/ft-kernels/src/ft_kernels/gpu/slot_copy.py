"""Fill expert-cache slots from the host bank with the copy list and its length read on the device.

The cache-control kernel writes the copy list (flat ids -> slots) and its length into device memory;
this kernel copies those rows without the host ever reading them: no synchronisation, so a layer step
can queue control, fills and the slot GEMM back to back (and be captured in a CUDA graph). One program
per (list entry, chunk of a row); entries at or past ``count[0]`` do nothing.

On a GPU the source is the page-locked host bank, read by the SMs through its unified virtual address
(memory registered with cudaHostRegister on a UVA system is mapped, at the same address): a zero-copy
read over the bus, no copy engine and no staging. On the CPU stand-in (Triton's interpreter) source and
destination are host tensors. Rows are moved as 32-bit words when their bytes allow, else as bytes.
Twin: ``copy_rows_reference``. Legend: N = bank rows (flat ids), S = slots, W = words a row, Q = list room.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024  # words a program moves per load / store
CHUNK = 16384  # words of a row one program moves (64 KiB as int32)


@triton.jit
def _copy_rows(src, dst, ids, slots, count, W, BLOCK: tl.constexpr, CHUNK: tl.constexpr):
    j = tl.program_id(0)
    n = tl.load(count)
    if j < n:
        i = tl.load(ids + j).to(tl.int64)
        s = tl.load(slots + j).to(tl.int64)
        c0 = tl.program_id(1).to(tl.int64) * CHUNK
        for k in range(0, CHUNK, BLOCK):
            off = c0 + k + tl.arange(0, BLOCK)
            m = off < W
            v = tl.load(src + i * W + off, mask=m)
            tl.store(dst + s * W + off, v, mask=m)


def _words(t: torch.Tensor) -> torch.Tensor:
    """``t`` [rows, ...] contiguous, as [rows, W] int32 words (bytes when a row's are not a multiple of 4)."""
    b = t.reshape(t.shape[0], -1).view(torch.uint8)
    if b.shape[1] % 4 == 0 and b.data_ptr() % 4 == 0:
        return b.view(torch.int32)
    return b


def copy_rows(
    src: torch.Tensor,
    dst: torch.Tensor,
    ids: torch.Tensor,
    slots: torch.Tensor,
    count: torch.Tensor,
) -> None:
    """dst[slots[j]] = src[ids[j]] for j < count[0], in place. src [N, ...] (host, page-locked where dst
    is on a GPU), dst [S, ...] the same row shape and dtype, both contiguous; ids / slots [Q] int64 and
    count [>= 1] int32 on dst's device (the control kernel's copy list and counts). Q bounds the list:
    the launch covers Q entries whatever count holds, so nothing is read back."""
    if src.shape[1:] != dst.shape[1:] or src.dtype != dst.dtype:
        raise ValueError(
            f"slot copy: bank rows {tuple(src.shape[1:])} {src.dtype} do not match slots "
            f"{tuple(dst.shape[1:])} {dst.dtype}"
        )
    if not (src.is_contiguous() and dst.is_contiguous()):
        raise ValueError("slot copy needs contiguous bank and slot tensors")
    Q = ids.numel()
    if Q == 0 or src.numel() == 0:
        return
    s, d = _words(src), _words(dst)
    if s.dtype != d.dtype:  # one aligned, the other not: both as bytes
        s, d = s.view(torch.uint8), d.view(torch.uint8)
    W = s.shape[1]
    _copy_rows[(Q, triton.cdiv(W, CHUNK))](s, d, ids, slots, count, W, BLOCK=BLOCK, CHUNK=CHUNK)


def copy_rows_reference(
    src: torch.Tensor,
    dst: torch.Tensor,
    ids: torch.Tensor,
    slots: torch.Tensor,
    count: torch.Tensor,
) -> None:
    """The torch twin of ``copy_rows`` (reads the count on the host)."""
    n = int(count[0])
    if n:
        dst[slots[:n].to(dst.device)] = src[ids[:n].to(src.device)].to(dst.device)
