"""RoPE as one Triton kernel for q and k (CUDA).

Imported only by the ``triton`` variant, on a machine with a CUDA device and
triton installed (``_device.triton_available``); never at import of kernels.

One launch covers both tensors: the first programs take q's rows, the rest
k's (k may have fewer heads). A row is one (batch, position, head) vector of
D elements; each program takes BLOCK_R rows and both halves of each pair
(i, i + D/2 half-split, or 2i, 2i + 1 interleaved), computes in fp32 and
stores once in the input dtype. Any layout whose last dimension is contiguous
works, through the logical (b, s, n) strides; rows are walked in memory order
(heads inner for BSND, positions inner for BNSD). Memory traffic is the
minimum: q and k read once and written once, cos/sin rows read from cache.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import _alloc


@triton.jit
def _rope_rows(x_ptr, o_ptr, cos_ptr, sin_ptr, blk, n_rows, S, N,
               sxb, sxs, sxn, sob, sos, son, scs,
               HALF: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr,
               INTERLEAVED: tl.constexpr, SEQ_INNER: tl.constexpr):
    rows = (blk * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    rmask = rows < n_rows
    if SEQ_INNER:
        s = rows % S
        n = (rows // S) % N
        b = rows // (S * N)
    else:
        n = rows % N
        s = (rows // N) % S
        b = rows // (N * S)
    cols = tl.arange(0, BLOCK_H)
    cmask = cols < HALF
    if INTERLEAVED:
        i1 = cols * 2
        i2 = cols * 2 + 1
    else:
        i1 = cols
        i2 = cols + HALF
    mask = rmask[:, None] & cmask[None, :]
    xrow = (b * sxb + s * sxs + n * sxn)[:, None]
    orow = (b * sob + s * sos + n * son)[:, None]
    crow = (s * scs)[:, None]
    x1 = tl.load(x_ptr + xrow + i1[None, :], mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + xrow + i2[None, :], mask=mask, other=0.0).to(tl.float32)
    c1 = tl.load(cos_ptr + crow + i1[None, :], mask=mask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + crow + i2[None, :], mask=mask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + crow + i1[None, :], mask=mask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + crow + i2[None, :], mask=mask, other=0.0).to(tl.float32)
    o1 = x1 * c1 - x2 * s1
    o2 = x2 * c2 + x1 * s2
    tl.store(o_ptr + orow + i1[None, :], o1.to(o_ptr.dtype.element_ty), mask=mask)
    tl.store(o_ptr + orow + i2[None, :], o2.to(o_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_qk_kernel(q_ptr, qo_ptr, k_ptr, ko_ptr, cos_ptr, sin_ptr,
                    rows_q, rows_k, blocks_q, S, Nq, Nk,
                    sqb, sqs, sqn, sqob, sqos, sqon,
                    skb, sks, skn, skob, skos, skon, scs,
                    HALF: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr,
                    INTERLEAVED: tl.constexpr, SEQ_INNER: tl.constexpr):
    pid = tl.program_id(0)
    if pid < blocks_q:
        _rope_rows(q_ptr, qo_ptr, cos_ptr, sin_ptr, pid, rows_q, S, Nq,
                   sqb, sqs, sqn, sqob, sqos, sqon, scs,
                   HALF, BLOCK_R, BLOCK_H, INTERLEAVED, SEQ_INNER)
    else:
        _rope_rows(k_ptr, ko_ptr, cos_ptr, sin_ptr, pid - blocks_q, rows_k, S, Nk,
                   skb, sks, skn, skob, skos, skon, scs,
                   HALF, BLOCK_R, BLOCK_H, INTERLEAVED, SEQ_INNER)


def _bsn_strides(t: torch.Tensor, layout: str) -> tuple[int, int, int]:
    """Strides (in elements) of batch, position and head."""
    if layout == "BSND":
        return t.stride(0), t.stride(1), t.stride(2)
    return t.stride(0), t.stride(2), t.stride(1)


def rope(q, k, cos, sin, layout, interleaved):
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k.stride(-1) != 1:
        k = k.contiguous()
    cos, sin = cos.contiguous(), sin.contiguous()
    qo = _alloc.empty_like(q, memory_format=torch.contiguous_format)
    ko = _alloc.empty_like(k, memory_format=torch.contiguous_format)
    B, D = q.shape[0], q.shape[-1]
    if layout == "BSND":
        S, Nq, Nk = q.shape[1], q.shape[2], k.shape[2]
    else:
        S, Nq, Nk = q.shape[2], q.shape[1], k.shape[1]
    half = D // 2
    block_h = triton.next_power_of_2(half)
    block_r = max(1, min(64, 4096 // block_h))
    rows_q, rows_k = B * S * Nq, B * S * Nk
    blocks_q, blocks_k = triton.cdiv(rows_q, block_r), triton.cdiv(rows_k, block_r)
    grid = (blocks_q + blocks_k,)
    _rope_qk_kernel[grid](
        q, qo, k, ko, cos, sin,
        rows_q, rows_k, blocks_q, S, Nq, Nk,
        *_bsn_strides(q, layout), *_bsn_strides(qo, layout),
        *_bsn_strides(k, layout), *_bsn_strides(ko, layout), cos.stride(0),
        HALF=half, BLOCK_R=block_r, BLOCK_H=block_h,
        INTERLEAVED=bool(interleaved), SEQ_INNER=(layout == "BNSD"),
        num_warps=4,
    )
    return qo, ko
