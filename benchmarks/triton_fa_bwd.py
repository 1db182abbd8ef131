"""The peer for benchmarks/fmha_bwd.py: a flash-attention backward in Triton, the algorithm of
Triton's fused-attention tutorial (`_attn_bwd`: one program computes dK/dV of a key block by
walking the query blocks, then dQ of a query block by walking the key blocks, recomputing P in
both; D = rowsum(dO * O) comes from its preprocess kernel, which the model charges like our
dot_do_o; under a causal mask the diagonal blocks are walked masked and finer, the others
unmasked, as in the tutorial). Compiled on this CPU for an AMD arch
the way Triton's JIT specializes a real call: `tt.divisibility` 16 on every pointer and on every
stride and size that is a multiple of 16 (the contiguous [B, H, S, D] case), with a small sweep
over the tutorial-style configs. Imported only when `triton` is installed (benchmark-only)."""

from __future__ import annotations

import os
import time

# Triton 3.9 warns until this is set; 1 is the JIT's default (fused multiply-adds), kept explicit.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

BLK_SLICE_FACTOR = tl.constexpr(2)  # the tutorial's: blocks on the causal diagonal take half as many rows per step


@triton.jit
def attn_bwd_preprocess(Out, DO, Delta, N_CTX, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    # Delta = rowsum(O * dO), one row block per program; grid (N_CTX / BLOCK_M, B * H).
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    bh = tl.program_id(1)
    offs = bh * N_CTX * HEAD_DIM + offs_m[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    o = tl.load(Out + offs).to(tl.float32)
    do = tl.load(DO + offs).to(tl.float32)
    tl.store(Delta + bh * N_CTX + offs_m, tl.sum(o * do, axis=1))


@triton.jit
def _dkdv_walk(dk, dv, Q, k, v, sm_scale, DO, LSE, Delta, stride_tok, row_base, offs_n, offs_d, start_m, num_steps,
               BLOCK_M: tl.constexpr, MASK: tl.constexpr):
    # dK and dV of a key block over num_steps query blocks of BLOCK_M rows from start_m.
    for _ in range(num_steps):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        qT = tl.load(Q + offs_m[None, :] * stride_tok + offs_d[:, None])
        lse = tl.load(LSE + row_base + offs_m)
        pT = tl.math.exp2(tl.dot(k, qT) * (sm_scale * 1.4426950408889634) - lse[None, :])
        if MASK:
            pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
        do = tl.load(DO + offs_m[:, None] * stride_tok + offs_d[None, :])
        dv += tl.dot(pT.to(do.dtype), do)
        di = tl.load(Delta + row_base + offs_m)
        dpT = tl.dot(v, tl.trans(do))
        dsT = (pT * (dpT - di[None, :])).to(qT.dtype)
        dk += tl.dot(dsT, tl.trans(qT))
        start_m += BLOCK_M
    return dk, dv


@triton.jit
def _dq_walk(dq, q, do, lse, di, K, V, sm_scale, stride_tok, offs_m, offs_d, start_n, num_steps,
             BLOCK_N: tl.constexpr, MASK: tl.constexpr):
    # dQ of a query block over num_steps key blocks of BLOCK_N keys from start_n.
    for _ in range(num_steps):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kT = tl.load(K + offs_n[None, :] * stride_tok + offs_d[:, None])
        vT = tl.load(V + offs_n[None, :] * stride_tok + offs_d[:, None])
        p = tl.math.exp2(tl.dot(q, kT) * (sm_scale * 1.4426950408889634) - lse[:, None])
        if MASK:
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
        dp = tl.dot(do, vT)
        ds = (p * (dp - di[:, None])).to(kT.dtype)
        dq += tl.dot(ds, tl.trans(kT))
        start_n += BLOCK_N
    return dq


@triton.jit
def attn_bwd(Q, K, V, sm_scale, DO, DQ, DK, DV, LSE, Delta, stride_h, stride_tok, N_CTX,
             BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr,
             HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr):
    # LSE is in base 2 here (q.k is scaled by sm_scale * log2(e) before exp2). Under a causal mask
    # the blocks on the diagonal are walked masked, BLK_SLICE_FACTOR times finer, and the others
    # unmasked, as in the tutorial.
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh * stride_h
    Q += base
    K += base
    V += base
    DO += base
    row_base = bh * N_CTX
    offs_d = tl.arange(0, HEAD_DIM)

    # dK and dV of keys [start_n, start_n + BLOCK_N1): walk the query blocks that see them.
    start_n = pid * BLOCK_N1
    offs_n = start_n + tl.arange(0, BLOCK_N1)
    k = tl.load(K + offs_n[:, None] * stride_tok + offs_d[None, :])
    v = tl.load(V + offs_n[:, None] * stride_tok + offs_d[None, :])
    dk = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    num_steps = N_CTX // BLOCK_M1
    if CAUSAL:
        dk, dv = _dkdv_walk(dk, dv, Q, k, v, sm_scale, DO, LSE, Delta, stride_tok, row_base, offs_n, offs_d,
                            start_n, BLOCK_N1 // (BLOCK_M1 // BLK_SLICE_FACTOR), BLOCK_M1 // BLK_SLICE_FACTOR, True)
        num_steps = (N_CTX - start_n - BLOCK_N1) // BLOCK_M1
    dk, dv = _dkdv_walk(dk, dv, Q, k, v, sm_scale, DO, LSE, Delta, stride_tok, row_base, offs_n, offs_d,
                        N_CTX - num_steps * BLOCK_M1, num_steps, BLOCK_M1, False)
    tl.store(DK + base + offs_n[:, None] * stride_tok + offs_d[None, :], (dk * sm_scale).to(k.dtype))
    tl.store(DV + base + offs_n[:, None] * stride_tok + offs_d[None, :], dv.to(v.dtype))

    # dQ of queries [start_m, start_m + BLOCK_M2): walk the key blocks they see.
    start_m = pid * BLOCK_M2
    offs_m = start_m + tl.arange(0, BLOCK_M2)
    q = tl.load(Q + offs_m[:, None] * stride_tok + offs_d[None, :])
    do = tl.load(DO + offs_m[:, None] * stride_tok + offs_d[None, :])
    lse = tl.load(LSE + row_base + offs_m)
    di = tl.load(Delta + row_base + offs_m)
    dq = tl.zeros([BLOCK_M2, HEAD_DIM], dtype=tl.float32)
    end_n = N_CTX
    if CAUSAL:
        end_n = start_m
        dq = _dq_walk(dq, q, do, lse, di, K, V, sm_scale, stride_tok, offs_m, offs_d, start_m,
                      BLOCK_M2 // (BLOCK_N2 // BLK_SLICE_FACTOR), BLOCK_N2 // BLK_SLICE_FACTOR, True)
    num_steps = end_n // BLOCK_N2
    dq = _dq_walk(dq, q, do, lse, di, K, V, sm_scale, stride_tok, offs_m, offs_d, end_n - num_steps * BLOCK_N2,
                  num_steps, BLOCK_N2, False)
    tl.store(DQ + base + offs_m[:, None] * stride_tok + offs_d[None, :], (dq * sm_scale).to(q.dtype))


# Tutorial-style configs (BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2, num_warps, num_stages): the
# tutorial's own 32/128/128/32 with 4 warps, and smaller ones that fit AMD's register files.
CONFIGS = [(32, 128, 128, 32, 4, 1), (32, 64, 64, 32, 4, 1), (16, 64, 64, 16, 4, 1), (32, 64, 64, 32, 8, 1),
           (64, 64, 64, 64, 8, 1), (32, 128, 128, 32, 4, 2)]

_POINTERS = ("Q", "K", "V", "DO", "DQ", "DK", "DV", "LSE", "Delta")


PRE_BLOCK = 128  # the tutorial's preprocess rows per program (4 warps)


def compile_triton_bwd(arch: str, wave_size: int, dtype: str, hdim: int, causal: bool,
                       config: tuple[int, ...]) -> tuple[str, dict, float, bytes]:
    """One config, specialized as the JIT would for contiguous [B, H, S, D] tensors whose sizes
    and strides are multiples of 16: (amdgcn assembly, metadata, seconds, code object)."""
    bm1, bn1, bm2, bn2, warps, stages = config
    ty = {"f16": "*fp16", "bf16": "*bf16"}[dtype]
    sig = {name: ("*fp32" if name in ("LSE", "Delta") else ty) for name in _POINTERS}
    sig.update({"sm_scale": "fp32", "stride_h": "i32", "stride_tok": "i32", "N_CTX": "i32"})
    return _compile(attn_bwd, arch, wave_size, sig, [*_POINTERS, "stride_h", "stride_tok", "N_CTX"],
                    {"BLOCK_M1": bm1, "BLOCK_N1": bn1, "BLOCK_M2": bm2, "BLOCK_N2": bn2, "HEAD_DIM": hdim,
                     "CAUSAL": causal}, warps, stages)


def compile_triton_preprocess(arch: str, wave_size: int, dtype: str, hdim: int) -> tuple[str, dict, float, bytes]:
    """The tutorial's preprocess (Delta = rowsum(O * dO)), specialized the same way."""
    ty = {"f16": "*fp16", "bf16": "*bf16"}[dtype]
    sig = {"Out": ty, "DO": ty, "Delta": "*fp32", "N_CTX": "i32"}
    return _compile(attn_bwd_preprocess, arch, wave_size, sig, list(sig),
                    {"BLOCK_M": PRE_BLOCK, "HEAD_DIM": hdim}, 4, 1)


def _compile(fn, arch: str, wave_size: int, sig: dict, divisible: list[str], constexprs: dict, warps: int,
             stages: int) -> tuple[str, dict, float, bytes]:
    order = fn.arg_names
    sig = {name: sig.get(name, "constexpr") for name in order}
    # The JIT marks 16-divisible pointers, strides and sizes with tt.divisibility 16.
    attrs = {(order.index(name),): [["tt.divisibility", 16]] for name in divisible}
    src = triton.compiler.ASTSource(fn=fn, signature=sig, attrs=attrs, constexprs=constexprs)
    t0 = time.perf_counter()
    k = triton.compile(src, target=GPUTarget("hip", arch, wave_size),
                       options={"num_warps": warps, "num_stages": stages})
    return k.asm["amdgcn"], dict(k.metadata._asdict()), time.perf_counter() - t0, k.asm["hsaco"]
