"""The peer kernel for benchmarks/fmha_fwd.py: a flash-attention forward written in Triton (the
standard online-softmax algorithm of Triton's fused-attention tutorial, with its causal split:
the key blocks left of the diagonal run without a mask, only the diagonal blocks compute it),
compiled for an AMD arch on the CPU the way Triton's JIT specializes a real call:
`tt.divisibility` 16 on every pointer and on every stride and size that is a multiple of 16 (the
contiguous [B, S, H, D] case), over the tutorial's AMD configs (CONFIGS). Imported only when
`triton` is installed (`pip install triton`: a benchmark-only dependency)."""

from __future__ import annotations

import os
import struct
import time

import numpy as np

# Triton 3.9 warns until this is set; 1 is the JIT's default (fused multiply-adds), kept explicit.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

LOG2E = 1.4426950408889634


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, K, V, stride_tok, start_m, qk_scale, lo, hi,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr):
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = tl.load(K + (start_n + offs_n[None, :]) * stride_tok + offs_d[:, None])
        qk = tl.dot(q, k)
        if MASKED:
            qk = qk * qk_scale + tl.where(offs_m[:, None] >= start_n + offs_n[None, :], 0.0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + (start_n + offs_n[:, None]) * stride_tok + offs_d[None, :])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def attn_fwd(Q, K, V, Out, sm_scale, stride_z, stride_h, stride_tok, H, N_CTX,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr):
    # Q, K, V, Out: [Z, N_CTX, H, HEAD_DIM] with unit head-dim stride; grid (N_CTX / BLOCK_M, Z * H).
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    base = (off_hz // H) * stride_z + (off_hz % H) * stride_h
    Q += base
    K += base
    V += base
    Out += base
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + offs_m[:, None] * stride_tok + offs_d[None, :])
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    # Causal: the blocks left of the diagonal unmasked, then the diagonal ones masked
    # (BLOCK_M is a multiple of BLOCK_N); full: every block unmasked.
    hi = start_m * BLOCK_M if CAUSAL else N_CTX
    acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K, V, stride_tok, start_m, qk_scale, 0, hi,
                                    BLOCK_M, BLOCK_N, HEAD_DIM, False)
    if CAUSAL:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K, V, stride_tok, start_m, qk_scale,
                                        hi, hi + BLOCK_M, BLOCK_M, BLOCK_N, HEAD_DIM, True)
    acc = acc / l_i[:, None]
    tl.store(Out + offs_m[:, None] * stride_tok + offs_d[None, :], acc.to(Out.type.element_ty))


def configs(hdim: int, causal: bool) -> list[tuple[int, int, int, int, int]]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages, waves_per_eu) to try: the tutorial's AMD sweep
    (BLOCK_M 64/128 x BLOCK_N 32/64/128 x 4/8 warps, 1 stage; waves_per_eu 3 at head dim <= 64,
    else 2), Triton's default waves_per_eu 0 beside it, and 2 stages at its 128x64 tile. Causal
    drops tiles whose BLOCK_N exceeds BLOCK_M (the diagonal split needs BLOCK_M % BLOCK_N == 0)."""
    wpe = 3 if hdim <= 64 else 2
    out = [(bm, bn, w, 1, e) for bm in (128, 64) for bn in (64, 128, 32) for w in (4, 8) for e in (0, wpe)]
    out += [(128, 64, 4, 2, 0), (128, 64, 8, 2, 0)]
    return [c for c in out if not causal or c[0] % c[1] == 0]


_POINTERS = ("Q", "K", "V", "Out")


def compile_triton(arch: str, wave_size: int, dtype: str, hdim: int, causal: bool,
                   config: tuple[int, int, int, int, int] = (128, 64, 4, 1, 0), n_ctx: int = 512,
                   heads: int = 2) -> tuple[str, dict, float, bytes]:
    """One config, specialized as the JIT would for contiguous [B, S, H, D] tensors of these sizes:
    (amdgcn assembly, metadata dict, seconds, code object)."""
    bm, bn, warps, stages, wpe = config
    ty = {"f16": "*fp16", "bf16": "*bf16"}[dtype]
    order = attn_fwd.arg_names
    sig = {name: ty for name in _POINTERS}
    sig.update({"sm_scale": "fp32", "stride_z": "i32", "stride_h": "i32", "stride_tok": "i32", "H": "i32",
                "N_CTX": "i32", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "HEAD_DIM": "constexpr",
                "CAUSAL": "constexpr"})
    sig = {name: sig[name] for name in order}
    # The JIT marks 16-divisible pointers (allocations are) and integers with tt.divisibility 16.
    ints = {"stride_z": n_ctx * heads * hdim, "stride_h": hdim, "stride_tok": heads * hdim, "H": heads,
            "N_CTX": n_ctx}
    divisible = [*_POINTERS, *(name for name, value in ints.items() if value % 16 == 0)]
    attrs = {(order.index(name),): [["tt.divisibility", 16]] for name in divisible}
    src = triton.compiler.ASTSource(fn=attn_fwd, signature=sig, attrs=attrs, constexprs={
        "BLOCK_M": bm, "BLOCK_N": bn, "HEAD_DIM": hdim, "CAUSAL": causal})
    # allow_flush_denorm: the tutorial's AMD setting, beside waves_per_eu.
    options = {"num_warps": warps, "num_stages": stages, "waves_per_eu": wpe, "allow_flush_denorm": True}
    t0 = time.perf_counter()
    k = triton.compile(src, target=GPUTarget("hip", arch, wave_size), options=options)
    return k.asm["amdgcn"], dict(k.metadata._asdict()), time.perf_counter() - t0, k.asm["hsaco"]


def launch(dev, hsaco: bytes, metadata: dict, config: tuple[int, ...], q: np.ndarray, k: np.ndarray,
           v: np.ndarray) -> np.ndarray:
    """Run a compiled attn_fwd on `dev` (a tiledsl Device) for contiguous [B, S, H, D] q, k, v
    (the sizes it was compiled for); returns the output."""
    b, s, h, d = q.shape
    kern = dev.kernel(hsaco, "attn_fwd")
    bufs = [dev.to_device(x, name) for name, x in (("Q", q), ("K", k), ("V", v), ("Out", np.zeros_like(q)))]
    scratch = dev.to_device(np.zeros(16, np.uint8), "scratch")
    values = [*(buf.addr for buf in bufs), d ** -0.5, s * h * d, d, h * d, h, s]
    args = [a for a in kern.meta[".args"] if not a.get(".value_kind", "").startswith("hidden_")]
    values += [scratch.addr] * (len(args) - len(values))  # Triton's global and profile scratch pointers
    ka = bytearray(args[-1][".offset"] + args[-1][".size"])
    for arg, value in zip(args, values, strict=True):
        fmt = "<Q" if arg[".size"] == 8 else "<f" if isinstance(value, float) else "<i"
        struct.pack_into(fmt, ka, arg[".offset"], value)
    bm, _, warps = config[:3]
    dev.launch(kern, (s // bm, b * h, 1), (warps * dev.arch.wave_size, 1, 1), bytes(ka),
               dynamic_lds=int(metadata["shared"]))
    return dev.from_device(bufs[3], q.dtype, q.shape)
