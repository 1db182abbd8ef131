"""The peer for benchmarks/fmha_bwd.py: a flash-attention backward in Triton, the algorithm of
Triton's fused-attention tutorial (`_attn_bwd`: one program computes dK/dV of a key block by
walking the query blocks, then dQ of a query block by walking the key blocks, recomputing P in
both; D = rowsum(dO * O) comes from a preprocess kernel). Compiled on this CPU for an AMD arch
the way Triton's JIT specializes a real call: `tt.divisibility` 16 on every pointer and on every
stride and size that is a multiple of 16 (the contiguous [B, H, S, D] case), with a small sweep
over the tutorial-style configs. Imported only when `triton` is installed (benchmark-only)."""

from __future__ import annotations

import time

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

LN2 = 0.6931471824645996


@triton.jit
def attn_bwd(Q, K, V, sm_scale, DO, DQ, DK, DV, LSE, Delta, stride_h, stride_tok, N_CTX,
             BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr,
             HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr):
    # LSE is in base 2 here and q.k is pre-multiplied by sm_scale * log2(e) (K is scaled on load).
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh * stride_h
    row_base = bh * N_CTX
    offs_d = tl.arange(0, HEAD_DIM)

    # dK and dV of keys [start_n, start_n + BLOCK_N1): walk the query blocks that see them.
    start_n = pid * BLOCK_N1
    offs_n = start_n + tl.arange(0, BLOCK_N1)
    k = tl.load(K + base + offs_n[:, None] * stride_tok + offs_d[None, :])
    v = tl.load(V + base + offs_n[:, None] * stride_tok + offs_d[None, :])
    dk = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    lo = start_n if CAUSAL else 0
    for start_m in range(lo, N_CTX, BLOCK_M1):
        offs_m = start_m + tl.arange(0, BLOCK_M1)
        qT = tl.load(Q + base + offs_m[None, :] * stride_tok + offs_d[:, None])
        lse = tl.load(LSE + row_base + offs_m)
        qkT = tl.dot(k, qT) * (sm_scale * 1.4426950408889634)
        pT = tl.math.exp2(qkT - lse[None, :])
        if CAUSAL:
            pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
        do = tl.load(DO + base + offs_m[:, None] * stride_tok + offs_d[None, :])
        dv += tl.dot(pT.to(do.dtype), do)
        di = tl.load(Delta + row_base + offs_m)
        dpT = tl.dot(v, tl.trans(do))
        dsT = (pT * (dpT - di[None, :])).to(qT.dtype)
        dk += tl.dot(dsT, tl.trans(qT))
    tl.store(DK + base + offs_n[:, None] * stride_tok + offs_d[None, :], (dk * sm_scale).to(k.dtype))
    tl.store(DV + base + offs_n[:, None] * stride_tok + offs_d[None, :], dv.to(v.dtype))

    # dQ of queries [start_m, start_m + BLOCK_M2): walk the key blocks they see.
    start_m = pid * BLOCK_M2
    offs_m = start_m + tl.arange(0, BLOCK_M2)
    q = tl.load(Q + base + offs_m[:, None] * stride_tok + offs_d[None, :])
    do = tl.load(DO + base + offs_m[:, None] * stride_tok + offs_d[None, :])
    lse = tl.load(LSE + row_base + offs_m)
    di = tl.load(Delta + row_base + offs_m)
    dq = tl.zeros([BLOCK_M2, HEAD_DIM], dtype=tl.float32)
    hi = start_m + BLOCK_M2 if CAUSAL else N_CTX
    for start_n2 in range(0, hi, BLOCK_N2):
        offs_n2 = start_n2 + tl.arange(0, BLOCK_N2)
        kT = tl.load(K + base + offs_n2[None, :] * stride_tok + offs_d[:, None])
        vT = tl.load(V + base + offs_n2[None, :] * stride_tok + offs_d[:, None])
        qk = tl.dot(q, kT) * (sm_scale * 1.4426950408889634)
        p = tl.math.exp2(qk - lse[:, None])
        if CAUSAL:
            p = tl.where(offs_m[:, None] >= offs_n2[None, :], p, 0.0)
        dp = tl.dot(do, vT)
        ds = (p * (dp - di[:, None])).to(kT.dtype)
        dq += tl.dot(ds, tl.trans(kT))
    tl.store(DQ + base + offs_m[:, None] * stride_tok + offs_d[None, :], (dq * sm_scale).to(q.dtype))


# Tutorial-style configs (BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2, num_warps, num_stages): the
# tutorial's own 32/128/128/32 with 4 warps, and smaller ones that fit AMD's register files.
CONFIGS = [(32, 128, 128, 32, 4, 1), (32, 64, 64, 32, 4, 1), (16, 64, 64, 16, 4, 1), (32, 64, 64, 32, 8, 1),
           (64, 64, 64, 64, 8, 1), (32, 128, 128, 32, 4, 2)]

_POINTERS = ("Q", "K", "V", "DO", "DQ", "DK", "DV", "LSE", "Delta")


def compile_triton_bwd(arch: str, wave_size: int, dtype: str, hdim: int, causal: bool,
                       config: tuple[int, ...]) -> tuple[str, dict, float, bytes]:
    """One config, specialized as the JIT would for contiguous [B, H, S, D] tensors whose sizes
    and strides are multiples of 16: (amdgcn assembly, metadata, seconds, code object)."""
    bm1, bn1, bm2, bn2, warps, stages = config
    ty = {"f16": "*fp16", "bf16": "*bf16"}[dtype]
    sig = {name: ("*fp32" if name in ("LSE", "Delta") else ty) for name in _POINTERS}
    sig.update({"sm_scale": "fp32", "stride_h": "i32", "stride_tok": "i32", "N_CTX": "i32"})
    for c in ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "HEAD_DIM", "CAUSAL"):
        sig[c] = "constexpr"
    order = attn_bwd.arg_names
    sig = {name: sig[name] for name in order}
    # The JIT marks 16-divisible pointers, strides and sizes with tt.divisibility 16.
    divisible = [*_POINTERS, "stride_h", "stride_tok", "N_CTX"]
    attrs = {(order.index(name),): [["tt.divisibility", 16]] for name in divisible}
    src = triton.compiler.ASTSource(fn=attn_bwd, signature=sig, attrs=attrs, constexprs={
        "BLOCK_M1": bm1, "BLOCK_N1": bn1, "BLOCK_M2": bm2, "BLOCK_N2": bn2, "HEAD_DIM": hdim, "CAUSAL": causal})
    t0 = time.perf_counter()
    k = triton.compile(src, target=GPUTarget("hip", arch, wave_size),
                       options={"num_warps": warps, "num_stages": stages})
    return k.asm["amdgcn"], dict(k.metadata._asdict()), time.perf_counter() - t0, k.asm["hsaco"]
