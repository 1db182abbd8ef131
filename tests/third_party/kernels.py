"""Triton kernels of the third-party corpus, written in the style of Triton's tutorials (vector
add, fused softmax, layer norm forward and backward, matmul, fused attention forward and
backward). Only regenerate.py imports this file (it needs `triton`); the test runs the committed
code objects. Each kernel is small and plain on purpose: the point is code our compiler did not
write, not a fast kernel."""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.hip import libdevice


@triton.jit
def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def softmax(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK: tl.constexpr,
            NUM_STAGES: tl.constexpr):
    # Persistent: each program walks rows pid, pid + num_programs, ...; a row fits in one block.
    start, step = tl.program_id(0), tl.num_programs(0)
    for row in tl.range(start, n_rows, step, num_stages=NUM_STAGES):
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        e = tl.exp(x)
        tl.store(out_ptr + row * out_stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


@triton.jit
def layer_norm_fwd(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK: tl.constexpr):
    # One program per row; the row is walked in blocks twice (statistics, then normalise).
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.0)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + cols, ((x - mean) * rstd * w + b).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def layer_norm_bwd_dx(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N, GROUP: tl.constexpr,
                      BLOCK: tl.constexpr):
    # One program per row (the whole row in one block). dx directly; dw and db partial sums are
    # added into row (row % GROUP) of DW/DB under a spin lock: Lock[g] is the lock, Lock[GROUP + g]
    # says whether the slot was written before (then add, else overwrite).
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + row * stride + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    wdy = tl.where(mask, w * dy, 0.0)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    tl.store(DX + row * stride + cols, dx.to(DX.dtype.element_ty), mask=mask)
    g = row % GROUP
    lock = Lock + g
    count = Lock + GROUP + g
    DW += g * N + cols
    DB += g * N + cols
    while tl.atomic_cas(lock, 0, 1) == 1:
        pass
    partial_dw = (dy * xhat).to(w.dtype)
    partial_db = dy.to(w.dtype)
    if tl.load(count) == 0:
        tl.atomic_xchg(count, 1)
    else:
        partial_dw += tl.load(DW, mask=mask)
        partial_db += tl.load(DB, mask=mask)
    tl.store(DW, partial_dw, mask=mask)
    tl.store(DB, partial_db, mask=mask)
    tl.debug_barrier()
    tl.atomic_xchg(lock, 0)


@triton.jit
def layer_norm_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Sum the GROUP partial rows (M of them) column block by column block.
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    dw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for i in range(0, M, BLOCK_M):
        rows = i + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += tl.load(DW + offs, mask=mask, other=0.0).to(tl.float32)
        db += tl.load(DB + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(FINAL_DW + cols, tl.sum(dw, axis=0).to(FINAL_DW.dtype.element_ty), mask=cols < N)
    tl.store(FINAL_DB + cols, tl.sum(db, axis=0).to(FINAL_DB.dtype.element_ty), mask=cols < N)


@triton.jit
def matmul(A, B, C, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # Grouped ordering of the output tiles (GROUP_M tile rows share B's columns), masked edges.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = A + (offs_m[:, None] % M) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = B + offs_k[:, None] * stride_bk + (offs_n[None, :] % N) * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = C + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_tok, start_m, qk_scale, lo, hi,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = tl.load(k_ptrs + start_n * stride_tok)  # K^T block: [HEAD_DIM, BLOCK_N]
        qk = tl.dot(q, k) * qk_scale
        if MASKED:
            qk = tl.where(offs_m[:, None] >= start_n + offs_n[None, :], qk, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptrs + start_n * stride_tok)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def attn_fwd(Q, K, V, Out, M, sm_scale, stride_h, stride_tok, N_CTX, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    # Causal attention over [B * H, N_CTX, HEAD_DIM]; grid (N_CTX / BLOCK_M, B * H). M gets the
    # row's log-sum-exp in base 2 (what the backward recomputes P from). Blocks left of the
    # diagonal run unmasked, the diagonal block masked.
    start_m = tl.program_id(0)
    base = tl.program_id(1).to(tl.int64) * stride_h
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + offs_m[:, None] * stride_tok + offs_d[None, :])
    k_ptrs = K + base + offs_n[None, :] * stride_tok + offs_d[:, None]
    v_ptrs = V + base + offs_n[:, None] * stride_tok + offs_d[None, :]
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_tok, start_m, qk_scale,
                                    0, start_m * BLOCK_M, BLOCK_M, BLOCK_N, False)
    acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_tok, start_m, qk_scale,
                                    start_m * BLOCK_M, (start_m + 1) * BLOCK_M, BLOCK_M, BLOCK_N, True)
    tl.store(M + tl.program_id(1) * N_CTX + offs_m, m_i + tl.math.log2(l_i))
    tl.store(Out + base + offs_m[:, None] * stride_tok + offs_d[None, :], (acc / l_i[:, None]).to(Out.type.element_ty))


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
def attn_bwd(Q, K, V, sm_scale, DO, DQ, DK, DV, M, D, stride_h, stride_tok, N_CTX, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    # Causal backward; grid (N_CTX / BLOCK_N, B * H). A program computes dK and dV of one key block
    # (walking the query blocks at or below the diagonal), then dQ of the query block with the same
    # index (walking the key blocks up to the diagonal), recomputing P from M in both.
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh.to(tl.int64) * stride_h
    row = bh * N_CTX
    offs_d = tl.arange(0, HEAD_DIM)
    scale2 = sm_scale * 1.44269504
    start_n = pid * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = tl.load(K + base + offs_n[:, None] * stride_tok + offs_d[None, :])
    v = tl.load(V + base + offs_n[:, None] * stride_tok + offs_d[None, :])
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    for start_m in range(start_n, N_CTX, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        qT = tl.load(Q + base + offs_m[None, :] * stride_tok + offs_d[:, None])
        m = tl.load(M + row + offs_m)
        pT = tl.math.exp2(tl.dot(k, qT) * scale2 - m[None, :])
        pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
        do = tl.load(DO + base + offs_m[:, None] * stride_tok + offs_d[None, :])
        dv += tl.dot(pT.to(do.dtype), do)
        delta = tl.load(D + row + offs_m)
        dpT = tl.dot(v, tl.trans(do))
        dsT = (pT * (dpT - delta[None, :])).to(qT.dtype)
        dk += tl.dot(dsT, tl.trans(qT))
    tl.store(DK + base + offs_n[:, None] * stride_tok + offs_d[None, :], (dk * sm_scale).to(k.dtype))
    tl.store(DV + base + offs_n[:, None] * stride_tok + offs_d[None, :], dv.to(v.dtype))

    start_m = pid * BLOCK_N
    offs_m = start_m + tl.arange(0, BLOCK_N)
    q = tl.load(Q + base + offs_m[:, None] * stride_tok + offs_d[None, :])
    do = tl.load(DO + base + offs_m[:, None] * stride_tok + offs_d[None, :])
    m = tl.load(M + row + offs_m)
    delta = tl.load(D + row + offs_m)
    dq = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    for start_k in range(0, start_m + BLOCK_N, BLOCK_M):
        offs_k = start_k + tl.arange(0, BLOCK_M)
        kT = tl.load(K + base + offs_k[None, :] * stride_tok + offs_d[:, None])
        vT = tl.load(V + base + offs_k[None, :] * stride_tok + offs_d[:, None])
        p = tl.math.exp2(tl.dot(q, kT) * scale2 - m[:, None])
        p = tl.where(offs_m[:, None] >= offs_k[None, :], p, 0.0)
        dp = tl.dot(do, vT)
        ds = (p * (dp - delta[:, None])).to(kT.dtype)
        dq += tl.dot(ds, tl.trans(kT))
    tl.store(DQ + base + offs_m[:, None] * stride_tok + offs_d[None, :], (dq * sm_scale).to(q.dtype))


# Kernels past the tutorials: the instruction classes a vendor library's code uses and attention
# kernels do not (ocml's math expansions, integer division, conversions and their rounding, cross-
# lane scans and sorts, atomics with and without results, other dot input types, Philox).


@triton.jit
def math_f32(X, Y, Out, n, BLOCK: tl.constexpr):
    # Row k of Out holds function k of x (and y where it takes two): ocml's expansions of the
    # libdevice calls, IEEE division and square root, the approximate exp/log Triton emits.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=1.0)
    y = tl.load(Y + offs, mask=mask, other=1.0)
    results = (tl.exp(x), tl.log(tl.abs(x) + 0.5), tl.sqrt(tl.abs(x)), tl.math.rsqrt(tl.abs(x) + 0.25),
               tl.sin(x), tl.cos(x), x / y, tl.div_rn(x, y), tl.floor(x * 3.7), tl.ceil(x * 3.7),
               tl.math.erf(x), libdevice.tanh(x), libdevice.pow(tl.abs(x) + 0.5, y), tl.sigmoid(x),
               tl.math.fma(x, y, 0.25), tl.maximum(x, y), tl.minimum(x, y), libdevice.atan2(x, y),
               libdevice.log1p(tl.abs(x)), libdevice.expm1(x * 0.5))
    for k in tl.static_range(len(results)):
        tl.store(Out + k * n + offs, results[k], mask=mask)


@triton.jit
def int_ops(A, B, Out, Wide, n, BLOCK: tl.constexpr):
    # Signed and unsigned division and remainder (no division instruction: reciprocal estimates
    # and corrections), shifts, high multiplies, 64-bit products and sums, bit counts.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(A + offs, mask=mask, other=1)
    b = tl.load(B + offs, mask=mask, other=1)
    ua, ub = a.to(tl.uint32, bitcast=True), b.to(tl.uint32, bitcast=True)
    results = (a // b, a % b, (ua // ub).to(tl.int32, bitcast=True), (ua % ub).to(tl.int32, bitcast=True),
               a >> (b & 31), (ua >> (ub & 31)).to(tl.int32, bitcast=True), a << (b & 31),
               tl.math.umulhi(ua, ub).to(tl.int32, bitcast=True), a * b, a ^ b, a & ~b, tl.abs(a),
               tl.minimum(a, b), tl.maximum(ua, ub).to(tl.int32, bitcast=True), libdevice.popc(a),
               libdevice.clz(a))
    for k in tl.static_range(len(results)):
        tl.store(Out + k * n + offs, results[k], mask=mask)
    wide = a.to(tl.int64) * b.to(tl.int64) + (a.to(tl.int64) << 20)
    tl.store(Wide + offs, wide, mask=mask)
    tl.store(Wide + n + offs, wide // 7, mask=mask)


@triton.jit
def conversions(X, F16Out, BF16Out, IntOut, F32Out, n, BLOCK: tl.constexpr):
    # f32 -> f16 and bf16 (nearest even), back to f32, f32 -> i32 (toward zero) and u8 (saturating
    # only through the int path), i32 -> f32, f16 -> i16 -> f32.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0.0)
    h = x.to(tl.float16)
    bf = x.to(tl.bfloat16)
    tl.store(F16Out + offs, h, mask=mask)
    tl.store(BF16Out + offs, bf, mask=mask)
    i = x.to(tl.int32)
    tl.store(IntOut + offs, i, mask=mask)
    tl.store(IntOut + n + offs, (i & 255).to(tl.uint8).to(tl.int32) + h.to(tl.int16).to(tl.int32) * 1000, mask=mask)
    tl.store(F32Out + offs, h.to(tl.float32) + bf.to(tl.float32), mask=mask)
    tl.store(F32Out + n + offs, (i * 3 + 1).to(tl.float32) * 0.5, mask=mask)


@triton.jit
def scan_sort(X, Ints, CumF, CumI, Sorted, ArgMax, ArgMin, N: tl.constexpr):
    # One row per program: prefix sums of f32 and i32, a bitonic sort, the arg-max and arg-min.
    row = tl.program_id(0)
    cols = tl.arange(0, N)
    x = tl.load(X + row * N + cols)
    i = tl.load(Ints + row * N + cols)
    tl.store(CumF + row * N + cols, tl.cumsum(x, axis=0))
    tl.store(CumI + row * N + cols, tl.cumsum(i, axis=0))
    tl.store(Sorted + row * N + cols, tl.sort(x, dim=0))
    tl.store(ArgMax + row, tl.argmax(x, axis=0))
    tl.store(ArgMin + row, tl.argmin(i, axis=0))


@triton.jit
def atomics(Keys, Vals, Hist, Sums, Maxes, Counter, Olds, n, BLOCK: tl.constexpr):
    # A histogram (i32 adds), per-bin f32 sums of small integers (exact in any order), per-bin
    # maxima, and one counter every lane adds 1 to, keeping the old values (a permutation of
    # 0 .. n - 1 whatever the order).
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    key = tl.load(Keys + offs, mask=mask, other=0)
    val = tl.load(Vals + offs, mask=mask, other=0)
    tl.atomic_add(Hist + key, 1, mask=mask)
    tl.atomic_add(Sums + key, val.to(tl.float32), mask=mask)
    tl.atomic_max(Maxes + key, val, mask=mask)
    old = tl.atomic_add(Counter + offs * 0, 1, mask=mask)
    tl.store(Olds + offs, old, mask=mask)


@triton.jit
def dot_typed(A, B, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, PRECISION: tl.constexpr):
    # One block: C = A @ B for the element types the case gives (bf16, int8 into int32, f32 with
    # the precision asked for).
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(A + rm[:, None] * K + rk[None, :])
    b = tl.load(B + rk[:, None] * N + rn[None, :])
    if PRECISION == "none":
        c = tl.dot(a, b)
    else:
        c = tl.dot(a, b, input_precision=PRECISION)
    tl.store(C + rm[:, None] * N + rn[None, :], c)


@triton.jit
def rand(Ints, Floats, seed, n, BLOCK: tl.constexpr):
    # Triton's Philox (ten rounds of 32-bit high and low multiplies): raw integers and uniform floats.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(Ints + offs, tl.randint(seed, offs), mask=mask)
    tl.store(Floats + offs, tl.rand(seed, offs + n), mask=mask)


@triton.jit
def math_f64(X, Y, Out, n, BLOCK: tl.constexpr):
    # f64: division and square root (v_div_scale/fmas/fixup_f64, v_rsq_f64 refined), ocml's exp,
    # log, sin, pow, and fma.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=1.0)
    y = tl.load(Y + offs, mask=mask, other=1.0)
    results = (x / y, libdevice.sqrt(tl.abs(x)), libdevice.exp(x), libdevice.log(tl.abs(x) + 0.5), libdevice.sin(x),
               libdevice.pow(tl.abs(x) + 0.5, y), tl.math.fma(x, y, 0.25), tl.floor(x * 3.7), x * y - x)
    for k in tl.static_range(len(results)):
        tl.store(Out + k * n + offs, results[k], mask=mask)


@triton.jit
def math_16bit(H, B, HOut, BOut, n, BLOCK: tl.constexpr):
    # Arithmetic in f16 and bf16 (packed f16 instructions, bf16 through f32 or natively on gfx950)
    # and conversions between the two.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    h = tl.load(H + offs, mask=mask, other=1.0)
    b = tl.load(B + offs, mask=mask, other=1.0)
    hs = (h * h + h, tl.math.fma(h, h, -h), tl.maximum(h, -h * 0.5), h / (tl.abs(h) + 1.0), b.to(tl.float16),
          tl.exp(h.to(tl.float32)).to(tl.float16))
    bs = (b * b + b, tl.minimum(b, -b), (b + b * 0.5), h.to(tl.bfloat16), tl.abs(b) + 1.0)
    for k in tl.static_range(len(hs)):
        tl.store(HOut + k * n + offs, hs[k], mask=mask)
    for k in tl.static_range(len(bs)):
        tl.store(BOut + k * n + offs, bs[k], mask=mask)


@triton.jit
def atomics_more(Flags, Swapped, Winners, HalfSums, Order, n, BLOCK: tl.constexpr):
    # Compare-and-swap (each slot goes to exactly one lane), exchange, f16 atomic adds (packed on
    # the archs that have them), and a 64-bit atomic add.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    slot = offs % 64
    won = tl.atomic_cas(Flags + slot, tl.zeros_like(offs), offs + 1) == 0
    tl.store(Winners + offs, won.to(tl.int32), mask=mask)
    old = tl.atomic_xchg(Swapped + offs, offs * 2, mask=mask)
    tl.store(Swapped + n + offs, old, mask=mask)
    tl.atomic_add(HalfSums + slot, tl.full([BLOCK], 1.0, tl.float16), mask=mask)
    tl.atomic_add(Order + slot, offs.to(tl.int64) << 33, mask=mask)


@triton.jit
def scan_custom(X, Out, Hist, N: tl.constexpr, BINS: tl.constexpr):
    # An associative scan with a combine of our own (running max and count of rows), a reduction
    # with one, and tl.histogram.
    row = tl.program_id(0)
    cols = tl.arange(0, N)
    x = tl.load(X + row * N + cols)
    running = tl.associative_scan(x, 0, _combine_max)
    tl.store(Out + row * N + cols, running)
    tl.store(Out + (tl.num_programs(0) + row) * N + cols, tl.cumprod(1.0 + 0.01 * x, axis=0))
    h = tl.histogram((tl.abs(x) * 4).to(tl.int32) % BINS, BINS)
    tl.store(Hist + row * BINS + tl.arange(0, BINS), h)


@triton.jit
def _combine_max(a, b):
    return tl.maximum(a, b)


@triton.jit
def gather_wide(Src, Idx, Out, stride, n, BLOCK: tl.constexpr):
    # 64-bit addressing (a stride that overflows 32 bits in the products), a gather through an
    # index tensor, and stores with cache modifiers.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    idx = tl.load(Idx + offs, mask=mask, other=0)
    far = idx.to(tl.int64) * stride  # element offsets past 2^31 bytes in the index arithmetic
    v = tl.load(Src + (far % 4096), mask=mask, other=-1.0, cache_modifier=".cg")
    tl.store(Out + offs, v * 2.0, mask=mask, cache_modifier=".cs")
    tl.store(Out + n + offs, (far >> 20).to(tl.float32), mask=mask, eviction_policy="evict_last")


@triton.jit
def dot_scaled(A, AS, B, BS, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, FA: tl.constexpr,
               FB: tl.constexpr):
    # One block of an MX-scaled dot (gfx950's v_mfma_scale_f32_*_f8f6f4): A [M, K] and B [K, N] in
    # fp4 (two per byte along K) or fp8, each run of 32 K values with its own E8M0 scale byte.
    PA: tl.constexpr = 2 if FA == "e2m1" else 1
    PB: tl.constexpr = 2 if FB == "e2m1" else 1
    rm, rn = tl.arange(0, M), tl.arange(0, N)
    a = tl.load(A + rm[:, None] * (K // PA) + tl.arange(0, K // PA)[None, :])
    b = tl.load(B + tl.arange(0, K // PB)[:, None] * N + rn[None, :])
    sa = tl.load(AS + rm[:, None] * (K // 32) + tl.arange(0, K // 32)[None, :])
    sb = tl.load(BS + rn[:, None] * (K // 32) + tl.arange(0, K // 32)[None, :])
    tl.store(C + rm[:, None] * N + rn[None, :], tl.dot_scaled(a, sa, FA, b, sb, FB))


@triton.jit
def math_special(X, Y, Out, n, BLOCK: tl.constexpr):
    # ocml's special functions in f32: inverse trigonometric and hyperbolic, erfinv/erfc, lgamma,
    # Bessel j0/y0, hypot, fmod, cbrt-like pow, nextafter, ilogb, rint, copysign, fast_expf.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0.5)
    y = tl.load(Y + offs, mask=mask, other=0.5)
    u = x * 0.3  # in (-1, 1) for the inputs the test gives
    results = (libdevice.asin(u), libdevice.acos(u), libdevice.atan(x), libdevice.tan(x), libdevice.sinh(x),
               libdevice.cosh(x), libdevice.asinh(x), libdevice.acosh(tl.abs(x) + 1.0), libdevice.atanh(u),
               libdevice.erfinv(u), libdevice.erfc(x), libdevice.lgamma(tl.abs(x) + 0.1), libdevice.j0(x),
               libdevice.y0(tl.abs(x) + 0.1), libdevice.hypot(x, y), libdevice.fmod(x * 7.0, y),
               libdevice.nextafter(x, y), libdevice.ilogb(x).to(tl.float32), libdevice.rint(x * 3.0),
               libdevice.copysign(x, y), libdevice.log10(tl.abs(x) + 0.01), libdevice.exp2(x))
    for k in tl.static_range(len(results)):
        tl.store(Out + k * n + offs, results[k], mask=mask)


@triton.jit
def dot_f16_acc(A, B, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    # A dot accumulating in f16 (gfx11's v_wmma_f16_16x16x16_f16 with its half-select; elsewhere an
    # f32 dot rounded), then K-major and transposed loads.
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(A + rm[:, None] * K + rk[None, :])
    bt = tl.load(B + rn[:, None] * K + rk[None, :])  # B stored transposed: [N, K]
    c = tl.dot(a, tl.trans(bt), out_dtype=tl.float16)
    tl.store(C + rm[:, None] * N + rn[None, :], c)


@triton.jit
def reshape_ops(X, Idx, Out, R: tl.constexpr, C: tl.constexpr):
    # Layout changes Triton lowers through LDS or lane shuffles: transpose, permute of a 3-D view,
    # join/split (interleave), and a gather along an axis.
    rr, cc = tl.arange(0, R), tl.arange(0, C)
    x = tl.load(X + rr[:, None] * C + cc[None, :])
    tl.store(Out + rr[:, None] + cc[None, :] * R, x)  # plain transposed store
    t = tl.trans(x)  # [C, R]
    tl.store(Out + R * C + cc[:, None] * R + rr[None, :], t * 2.0)
    p = tl.permute(tl.reshape(x, (R, 2, C // 2)), (1, 0, 2))  # [2, R, C // 2]
    z2 = tl.arange(0, 2)
    tl.store(Out + 2 * R * C + z2[:, None, None] * (R * C // 2) + rr[None, :, None] * (C // 2)
             + tl.arange(0, C // 2)[None, None, :], p)
    lo, hi = tl.split(tl.reshape(x, (R, C // 2, 2)))
    inter = tl.interleave(hi, lo)  # pairs swapped
    tl.store(Out + 3 * R * C + rr[:, None] * C + cc[None, :], inter)
    idx = tl.load(Idx + rr[:, None] * C + cc[None, :])
    tl.store(Out + 4 * R * C + rr[:, None] * C + cc[None, :], tl.gather(x, idx, axis=1))


@triton.jit
def fp8_casts(X, Q8, Back, n, F8: tl.constexpr, BLOCK: tl.constexpr):
    # f32 and bf16 to the arch's fp8 formats and back (v_cvt_pk_fp8_f32 / v_cvt_f32_fp8 and their
    # bf8 forms where the arch has them, else Triton's bit arithmetic).
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0.0)
    q = _to_f8(x, F8)
    tl.store(Q8 + offs, q.to(tl.uint8, bitcast=True), mask=mask)
    tl.store(Back + offs, q.to(tl.float32), mask=mask)
    qb = _to_f8(x.to(tl.bfloat16), F8)
    tl.store(Back + n + offs, qb.to(tl.bfloat16).to(tl.float32), mask=mask)


@triton.jit
def _to_f8(x, F8: tl.constexpr):
    if F8 == "fp8e4nv":
        return x.to(tl.float8e4nv)
    elif F8 == "fp8e5":
        return x.to(tl.float8e5)
    elif F8 == "fp8e4b8":
        return x.to(tl.float8e4b8)
    else:
        return x.to(tl.float8e5b16)
