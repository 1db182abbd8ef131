"""The peer kernel for benchmarks/fmha_fwd.py: a flash-attention forward written in Triton (the
standard online-softmax algorithm, as in Triton's own tutorial), compiled for an AMD arch on the
CPU. Only imported when `triton` is installed (`pip install triton`: a benchmark-only dependency)."""

from __future__ import annotations

import time

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget


@triton.jit
def attn_fwd(Q, K, V, Out, sm_scale, stride_qm, stride_kn, stride_vn, stride_om, N_CTX,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    base = tl.program_id(1) * N_CTX
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + (base + offs_m[:, None]) * stride_qm + offs_d[None, :])
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    hi = (start_m + 1) * BLOCK_M if CAUSAL else N_CTX
    for start_n in range(0, hi, BLOCK_N):
        k = tl.load(K + (base + start_n + offs_n[None, :]) * stride_kn + offs_d[:, None])
        qk = tl.dot(q, k)
        if CAUSAL:
            qk = tl.where(offs_m[:, None] >= (start_n + offs_n[None, :]), qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + (base + start_n + offs_n[:, None]) * stride_vn + offs_d[None, :])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Out + (base + offs_m[:, None]) * stride_om + offs_d[None, :], acc.to(Out.type.element_ty))


def compile_triton(arch: str, wave_size: int, dtype: str, hdim: int, causal: bool,
                   block_m: int = 128, block_n: int = 64, num_warps: int = 4) -> tuple[str, dict, float]:
    """Compile for `arch`; returns (amdgcn assembly, metadata dict, seconds)."""
    ty = {"f16": "*fp16", "bf16": "*bf16"}[dtype]
    sig = {"Q": ty, "K": ty, "V": ty, "Out": ty, "sm_scale": "fp32", "stride_qm": "i32", "stride_kn": "i32",
           "stride_vn": "i32", "stride_om": "i32", "N_CTX": "i32", "BLOCK_M": "constexpr",
           "BLOCK_N": "constexpr", "HEAD_DIM": "constexpr", "CAUSAL": "constexpr"}
    src = triton.compiler.ASTSource(fn=attn_fwd, signature=sig, constexprs={
        "BLOCK_M": block_m, "BLOCK_N": block_n, "HEAD_DIM": hdim, "CAUSAL": causal})
    t0 = time.perf_counter()
    k = triton.compile(src, target=GPUTarget("hip", arch, wave_size), options={"num_warps": num_warps})
    return k.asm["amdgcn"], dict(k.metadata._asdict()), time.perf_counter() - t0
