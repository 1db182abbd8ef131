"""Numpy reference implementations (float64 inside) of the kernels in `tiledsl/kernels/`.

They define what the kernels compute: tests compare kernel outputs against them, and users can
call them to check their own results. Inputs may be any numpy-convertible float arrays (float16,
float32, or bfloat16 from `ml_dtypes`); outputs are float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

CausalArg = bool | Literal["top_left", "bottom_right"]
LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class MaskParams:
    """How a (causal, window) request maps onto the kernel's mask: `kind` is the MASK constexpr of
    fmha_fwd.tile (none, causal_top_left, causal_bottom_right, window) and (left, right) its
    window_left/window_right arguments (-1 = unlimited on that side)."""

    kind: str
    left: int
    right: int

    @property
    def top_left(self) -> bool:
        return self.kind == "causal_top_left"


def fmha_mask_params(causal: CausalArg = False, window: tuple[int, int] = (-1, -1)) -> MaskParams:
    """Normalise flash-attention style mask arguments (see `fmha_fwd_reference`)."""
    left, right = (int(w) for w in window)
    if left < -1 or right < -1:
        raise ValueError(f"window sizes must be >= -1 (-1 = unlimited), got {window}")
    if causal not in (False, True, "top_left", "bottom_right"):
        raise ValueError(f"causal must be a bool, 'top_left' or 'bottom_right', got {causal!r}")
    # Normalise "unlimited" to -1 so equal masks compare equal.
    if causal:
        # Causal means "no key to the right of the diagonal"; a left window may still apply.
        kind = "causal_top_left" if causal == "top_left" else "causal_bottom_right"
        return MaskParams(kind, left, 0)
    if (left, right) == (-1, -1):
        return MaskParams("none", -1, -1)
    return MaskParams("window", left, right)


def fmha_mask(seqlen_q: int, seqlen_k: int, params: MaskParams) -> np.ndarray:
    """Boolean [seqlen_q, seqlen_k]: True where query i may attend to key j."""
    i = np.arange(seqlen_q)[:, None]
    j = np.arange(seqlen_k)[None, :]
    shift = 0 if params.top_left else seqlen_k - seqlen_q
    allowed = np.ones((seqlen_q, seqlen_k), dtype=bool)
    if params.left >= 0:
        allowed &= j >= i + shift - params.left
    if params.right >= 0:
        allowed &= j <= i + shift + params.right
    return allowed


def _to_bshd(x: np.ndarray, layout: str, varlen: bool, name: str) -> np.ndarray:
    """float64 view in [B, S, H, D] (group mode: [1, total, H, D])."""
    x = np.asarray(x, dtype=np.float64)
    rank = 3 if varlen else 4
    if x.ndim != rank:
        shape = "[total, H, D] (bshd) or [H, total, D] (bhsd)" if varlen else "[B, S, H, D] or [B, H, S, D]"
        raise ValueError(f"{name} must be {rank}-D {shape} in {'group' if varlen else 'batch'} mode, "
                         f"got shape {x.shape}")
    if varlen:
        x = x[None]
    if layout == "bhsd":
        x = x.transpose(0, 2, 1, 3)
    return x


def _from_bshd(x: np.ndarray, layout: str, varlen: bool) -> np.ndarray:
    if layout == "bhsd":
        x = x.transpose(0, 2, 1, 3)
    return x[0] if varlen else x


def _segments(cu: np.ndarray | None, batch: int, seqlen: int, name: str) -> list[tuple[int, int]]:
    if cu is None:
        return [(0, seqlen)] * batch
    cu = np.asarray(cu)
    if cu.ndim != 1 or len(cu) < 2 or cu[0] != 0 or np.any(np.diff(cu) < 0) or cu[-1] > seqlen:
        raise ValueError(f"{name} must be a non-decreasing 1-D array starting at 0 and ending at most at "
                         f"the packed length {seqlen}, got {cu}")
    return [(int(cu[b]), int(cu[b + 1] - cu[b])) for b in range(len(cu) - 1)]


def bias_shape(varlen: bool, batch: int, hq: int, sq: int, sk: int, max_lk: int,
               shape: tuple[int, ...]) -> tuple[int, ...]:
    """The full shape a bias of `shape` broadcasts to (numpy broadcasting; ValueError if it
    cannot): [B, Hq, Sq, Sk] in batch mode; [Hq, total_q, K] in group mode, where sequence b
    reads rows cu_seqlens_q[b].. and key columns 0..seqlen_k[b]-1, so K (the bias's last dim,
    e.g. max_seqlen_k) must cover the longest key sequence."""
    if varlen:
        cols = shape[-1] if shape and shape[-1] != 1 else max_lk
        full: tuple[int, ...] = (hq, sq, cols)
        what = f"[Hq, total_q, >= max seqlen_k] = [{hq}, {sq}, >= {max_lk}] (group mode)"
        if len(shape) > 3 or cols < max_lk:
            raise ValueError(f"bias: expected a shape broadcastable to {what}, got {shape}")
    else:
        full = (batch, hq, sq, sk)
        what = f"[B, Hq, Sq, Sk] = [{batch}, {hq}, {sq}, {sk}]"
        if len(shape) > 4:
            raise ValueError(f"bias: expected a shape broadcastable to {what}, got {shape}")
    pad = (1,) * (len(full) - len(shape)) + tuple(shape)
    if any(n not in (1, f) for n, f in zip(pad, full, strict=True)):
        raise ValueError(f"bias: expected a shape broadcastable to {what}, got {shape}")
    return full


def sum_to_shape(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The gradient of a tensor of `shape` that was broadcast to g.shape: g summed over the
    broadcast dimensions (leading ones, and those of size 1 in `shape`)."""
    g = g.sum(axis=tuple(range(g.ndim - len(shape)))) if g.ndim > len(shape) else g
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


@dataclass(frozen=True)
class _Problem:
    """Checked reference inputs: float64 [B, S, H, D] views, the sequences, scale, sink, mask."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    do: np.ndarray | None
    varlen: bool
    seg_q: list[tuple[int, int]]
    seg_k: list[tuple[int, int]]
    scale: float
    sink: np.ndarray | None
    mask: MaskParams
    bias: np.ndarray | None = None  # float64, broadcast to the full shape (see `bias_shape`)
    alibi: np.ndarray | None = None  # float64 [batch, Hq]

    @staticmethod
    def check(q, k, v, do, scale, causal, window, softcap, sink, cu_seqlens_q, cu_seqlens_k, layout,
              bias=None, alibi_slopes=None) -> _Problem:
        if layout not in ("bshd", "bhsd"):
            raise ValueError(f"layout must be 'bshd' or 'bhsd', got {layout!r}")
        varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
        if varlen and (cu_seqlens_q is None or cu_seqlens_k is None):
            raise ValueError("group mode needs both cu_seqlens_q and cu_seqlens_k")
        qb, kb, vb = (_to_bshd(x, layout, varlen, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
        dob = None if do is None else _to_bshd(do, layout, varlen, "do")
        batch, sq, hq, d = qb.shape
        _, sk, hk, _ = kb.shape
        if kb.shape[0] != batch or vb.shape[:3] != kb.shape[:3] or kb.shape[3] != d or \
                (dob is not None and dob.shape[:3] != qb.shape[:3]):
            raise ValueError(f"inconsistent shapes q {np.shape(q)}, k {np.shape(k)}, v {np.shape(v)}"
                             + ("" if do is None else f", do {np.shape(do)}"))
        if hk == 0 or hq % hk:
            raise ValueError(f"the number of query heads ({hq}) must be a multiple of key/value heads ({hk})")
        if softcap < 0:
            raise ValueError(f"softcap must be >= 0 (0 = off), got {softcap}")
        seg_q = _segments(cu_seqlens_q, batch, sq, "cu_seqlens_q")
        seg_k = _segments(cu_seqlens_k, batch, sk, "cu_seqlens_k")
        if len(seg_q) != len(seg_k):
            raise ValueError("cu_seqlens_q and cu_seqlens_k must have the same length")
        if bias is not None and alibi_slopes is not None:
            raise ValueError("bias and alibi_slopes: give at most one")
        full = bias_shape(varlen, batch, hq, sq, sk, max((lk for _, lk in seg_k), default=0), np.shape(bias)) \
            if bias is not None else None
        bias64 = None if bias is None else np.broadcast_to(np.asarray(bias, dtype=np.float64), full)
        alibi = None
        if alibi_slopes is not None:
            slopes = np.asarray(alibi_slopes, dtype=np.float64)
            if slopes.shape not in ((hq,), (len(seg_q), hq)):
                raise ValueError(f"alibi_slopes must have shape ({hq},) or ({len(seg_q)}, {hq}), got {slopes.shape}")
            alibi = np.broadcast_to(slopes, (len(seg_q), hq))
        return _Problem(qb, kb, vb, dob, varlen, seg_q, seg_k, 1.0 / np.sqrt(d) if scale is None else float(scale),
                        None if sink is None else np.asarray(sink, dtype=np.float64).reshape(hq),
                        fmha_mask_params(causal, window), bias64, alibi)

    def bias_of(self, b: int, q0: int, lq: int, lk: int) -> np.ndarray | None:
        """The additive bias [Hq, lq, lk] of sequence b (bias tensor or ALiBi), or None."""
        if self.bias is not None:
            return self.bias[:, q0:q0 + lq, :lk] if self.varlen else self.bias[b, :, :lq, :lk]
        if self.alibi is not None:
            i, j = np.arange(lq)[:, None], np.arange(lk)[None, :]
            return -self.alibi[b][:, None, None] * np.abs(i + lk - lq - j)[None]
        return None

    def sequences(self):
        """Per sequence: (batch index, (q0, lq), (k0, lk), q, k, v, do) with q/do [Hq, lq, D] and
        k/v [Hq, lk, D] (each query head's kv head, GQA)."""
        hq, hk = self.q.shape[2], self.k.shape[2]
        kv_head = np.arange(hq) // (hq // hk)
        for b, ((q0, lq), (k0, lk)) in enumerate(zip(self.seg_q, self.seg_k, strict=True)):
            bb = 0 if self.varlen else b
            dos = None if self.do is None else self.do[bb, q0:q0 + lq].transpose(1, 0, 2)
            yield (bb, (q0, lq), (k0, lk), self.q[bb, q0:q0 + lq].transpose(1, 0, 2),
                   self.k[bb, k0:k0 + lk][:, kv_head].transpose(1, 0, 2),
                   self.v[bb, k0:k0 + lk][:, kv_head].transpose(1, 0, 2), dos)


def fmha_fwd_reference(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float | None = None,
    causal: CausalArg = False,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    sink: np.ndarray | None = None,
    cu_seqlens_q: np.ndarray | None = None,
    cu_seqlens_k: np.ndarray | None = None,
    return_lse: bool = False,
    layout: Literal["bshd", "bhsd"] = "bshd",
    bias: np.ndarray | None = None,
    alibi_slopes: np.ndarray | None = None,
    dropout_p: float = 0.0,
    seed: int = 0,
    offset: int = 0,
    return_dropout_mask: bool = False,
) -> Any:
    """Attention forward, out = softmax(mask(cap(scale * q @ k^T) + bias)) @ v, in float64.

    Shapes (batch mode): q [B, Sq, Hq, D], k [B, Sk, Hk, D], v [B, Sk, Hk, Dv] for layout "bshd";
    [B, H, S, D] for "bhsd". Group (varlen) mode, when cu_seqlens_q and cu_seqlens_k (int arrays
    of length batch + 1, starting at 0) are given: q [total_q, Hq, D], k/v [total_k, Hk, D(v)]
    ("bshd") or [H, total, D] ("bhsd"); sequence b is rows cu_seqlens[b] .. cu_seqlens[b+1]-1.
    D and Dv may differ. GQA/MQA: Hq must be a multiple of Hk; query head h reads key/value head
    h // (Hq // Hk).

    Conventions (those of flash-attention):
      * scale defaults to 1 / sqrt(D).
      * softcap > 0 caps the logits: s = softcap * tanh(scale * q.k / softcap); 0 disables it.
      * Masks. Query i (0-based within its sequence) may see key j when
            j >= i + shift - left   (if left >= 0)   and   j <= i + shift + right   (if right >= 0)
        with window = (left, right), -1 meaning unlimited on that side. The diagonal is aligned to
        the bottom-right corner of the [seqlen_q, seqlen_k] score matrix, shift = seqlen_k -
        seqlen_q (flash-attention >= 2.1: the last query sees every key), except for
        causal="top_left", which aligns to the top-left corner (shift = 0: query i sees keys
        0..i). causal=True means "bottom_right". A causal mask is the window (left, 0): it keeps
        window[0] and ignores window[1]. When seqlen_q > seqlen_k, bottom-right causal leaves the
        first seqlen_q - seqlen_k query rows with no keys at all.
      * sink: optional float array [Hq] of logits (natural-log units, not scaled nor capped), one
        per query head, that join every row's softmax denominator but carry no value:
        out_i = sum_j exp(s_ij) v_j / (exp(sink_h) + sum_j exp(s_ij)).
      * A row with no allowed key writes 0. Its LSE is -inf, or sink_h with a sink (the LSE is
        the log of the whole denominator, sink included, as a backward pass needs it).
      * bias: an additive bias of the logits, after the soft-cap and before the mask (flash-
        attention's and CK's order), in any layout of q: batch mode, broadcastable to [B, Hq,
        Sq, Sk] (numpy broadcasting; a dim of 1 is shared); group mode, broadcastable to [Hq,
        total_q, K], where sequence b uses rows cu_seqlens_q[b].. and columns 0..seqlen_k[b]-1
        (K >= the longest key sequence, e.g. max_seqlen_k).
      * alibi_slopes: [Hq] or [batch, Hq] (batch = sequences); the bias of query i, key j of a
        sequence is -slope * |i + seqlen_k - seqlen_q - j| (flash-attention's ALiBi, aligned to
        the bottom-right corner whatever the mask). At most one of bias and alibi_slopes.
      * dropout_p > 0: out_i = sum_j P_ij keep_ij v_j * dropout_keep_scale(dropout_p), P the
        softmax (its denominator and the LSE count every element), keep = dropout_keep_mask(seed,
        offset, ...) with the sequence index as batch index; p counts in 1/256 steps.

    Returns out (float64, the layout of q, head dim Dv), then with return_lse the natural-log
    LSE [B, Hq, Sq] (group mode: [Hq, total_q], flash-attention's varlen layout), then with
    return_dropout_mask the keep bits, bool [B, Hq, Sq, Sk] (group mode [Hq, total_q,
    max_seqlen_k]: sequence b's rows from cu_seqlens_q[b], its keys from column 0, False past them).
    """
    p = _Problem.check(q, k, v, None, scale, causal, window, softcap, sink, cu_seqlens_q, cu_seqlens_k, layout,
                       bias, alibi_slopes)
    batch, sq, hq, _ = p.q.shape
    out = np.zeros((batch, sq, hq, p.v.shape[3]))
    lse = np.full((batch, hq, sq), -np.inf)
    max_k = max((lk for _, lk in p.seg_k), default=0)
    kept = np.zeros((hq, sq, max_k) if p.varlen else (batch, hq, sq, p.k.shape[1]), np.bool_)
    for n, (bb, (q0, lq), (_k0, lk), qs, ks, vs, _do) in enumerate(p.sequences()):
        keep = sequence_keep_mask(seed, offset, n, hq, lq, lk, dropout_p) if dropout_p > 0 else None
        o_seg, lse_seg = _attend(qs, ks, vs, p.scale, softcap, p.sink, fmha_mask(lq, lk, p.mask),
                                         p.bias_of(n, q0, lq, lk), keep, dropout_p)
        out[bb, q0:q0 + lq] = o_seg.transpose(1, 0, 2)
        lse[bb, :, q0:q0 + lq] = lse_seg
        if keep is not None:
            (kept[:, q0:q0 + lq, :lk] if p.varlen else kept[n, :, :lq, :lk])[...] = keep
    varlen = p.varlen
    result: tuple[np.ndarray, ...] = (_from_bshd(out, layout, varlen),)
    if return_lse:
        result += (lse[0] if varlen else lse,)
    if return_dropout_mask:
        result += (kept,)
    return result[0] if len(result) == 1 else result


def _attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, softcap: float,
            sink: np.ndarray | None, allowed: np.ndarray, bias: np.ndarray | None = None,
            keep: np.ndarray | None = None, dropout_p: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """One sequence, all heads: q [H, Sq, D], k [H, Sk, D], v [H, Sk, Dv] (bias and the dropout
    keep mask [H, Sq, Sk]) -> out, lse [H, Sq]."""
    s = np.einsum("hid,hjd->hij", q, k) * scale
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    if bias is not None:
        s = s + bias
    s = np.where(allowed[None], s, -np.inf)
    m = s.max(axis=2, initial=-np.inf)  # initial: Sk may be 0
    if sink is not None:
        m = np.maximum(m, sink[:, None])
    m_safe = np.where(np.isfinite(m), m, 0.0)  # empty rows: exp(-inf - 0) = 0, no NaN
    e = np.exp(s - m_safe[..., None])
    denom = e.sum(axis=2)
    if sink is not None:
        denom = denom + np.exp(sink[:, None] - m_safe)
    kept = e if keep is None else np.where(keep, e, 0.0) * dropout_keep_scale(dropout_p)
    # A row with no key (and no sink) has a zero denominator: output 0, LSE -inf. A NaN among the
    # inputs makes the denominator NaN, and its rows NaN, as the kernels' are.
    empty = denom == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(empty[..., None], 0.0, (kept @ v) / denom[..., None])
        lse = np.where(empty, -np.inf, np.log(denom) + m_safe)
    return out, lse


def fmha_bwd_reference(
    do: np.ndarray,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float | None = None,
    causal: CausalArg = False,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    sink: np.ndarray | None = None,
    cu_seqlens_q: np.ndarray | None = None,
    cu_seqlens_k: np.ndarray | None = None,
    layout: Literal["bshd", "bhsd"] = "bshd",
    bias: np.ndarray | None = None,
    alibi_slopes: np.ndarray | None = None,
    return_dbias: bool = False,
    dropout_p: float = 0.0,
    seed: int = 0,
    offset: int = 0,
) -> tuple[np.ndarray, ...]:
    """Attention backward in float64: the gradients of sum(do * out) for
    out = fmha_fwd_reference(q, k, v, same options) (shapes and conventions there).

    Returns (dq, dk, dv) in the layouts and shapes of q, k, v, then dsink [Hq] when `sink` is
    given, then dbias (the shape of `bias`) with return_dbias. With P the softmax probabilities
    (sink included in the denominator), D = rowsum(do * out): dv = P^T do, dS = P * (do v^T - D),
    through the soft-cap dS *= 1 - tanh^2, dq = scale * dS k, dk = scale * dS^T q; GQA sums
    dk/dv over the query heads sharing a kv head; dsink[h] = -sum over every row of exp(sink_h -
    LSE_row) * D_row. The bias is added to the capped logits, so dbias is dS before the soft-cap
    factor, summed over the dims the bias was broadcast along (0 where masked). Rows with no
    allowed key (and no sink) have P = 0 and contribute nothing. ALiBi slopes get no gradient.
    With dropout (Z = keep * dropout_keep_scale(p), the forward's mask): dv = (P Z)^T do, dS = P *
    ((do v^T) Z - D); D = rowsum(do * out) still holds, out being the dropped forward's output.
    """
    if return_dbias and bias is None:
        raise ValueError("return_dbias: needs a bias tensor")
    p = _Problem.check(q, k, v, do, scale, causal, window, softcap, sink, cu_seqlens_q, cu_seqlens_k, layout,
                       bias, alibi_slopes)
    hq, hk, d = p.q.shape[2], p.k.shape[2], p.q.shape[3]
    group = hq // hk
    dq, dk, dv = np.zeros(p.q.shape), np.zeros(p.k.shape), np.zeros(p.v.shape)
    dsink = np.zeros(hq)
    dbias = None if p.bias is None else np.zeros(p.bias.shape)
    scale, sink64 = p.scale, p.sink
    for n, (bb, (q0, lq), (k0, lk), qs, ks, vs, dos) in enumerate(p.sequences()):
        allowed = fmha_mask(lq, lk, p.mask)
        bias_seq = p.bias_of(n, q0, lq, lk)
        keep = sequence_keep_mask(seed, offset, n, hq, lq, lk, dropout_p) if dropout_p > 0 else None
        out, lse = _attend(qs, ks, vs, scale, softcap, sink64, allowed, bias_seq, keep, dropout_p)
        z = 1.0 if keep is None else keep * dropout_keep_scale(dropout_p)
        raw = np.einsum("hid,hjd->hij", qs, ks) * scale
        s = softcap * np.tanh(raw / softcap) if softcap > 0 else raw
        if bias_seq is not None:
            s = s + bias_seq
        lse_safe = np.where(np.isfinite(lse), lse, np.inf)  # empty rows: P = 0
        prob = np.where(allowed[None], np.exp(np.where(allowed[None], s, 0.0) - lse_safe[..., None]), 0.0)
        dd = (dos * out).sum(axis=2)  # D [Hq, lq]
        ds = prob * (np.einsum("hid,hjd->hij", dos, vs) * z - dd[..., None])
        if dbias is not None:
            if p.varlen:
                dbias[:, q0:q0 + lq, :lk] = ds
            else:
                dbias[n, :, :lq, :lk] = ds
        if softcap > 0:
            ds = ds * (1.0 - np.tanh(raw / softcap) ** 2)
        dq[bb, q0:q0 + lq] = (scale * ds @ ks).transpose(1, 0, 2)
        dk_h = scale * np.einsum("hij,hid->hjd", ds, qs)  # per query head [Hq, lk, D]
        dv_h = np.einsum("hij,hid->hjd", prob * z, dos)
        dk[bb, k0:k0 + lk] = dk_h.reshape(hk, group, lk, d).sum(axis=1).transpose(1, 0, 2)
        dv[bb, k0:k0 + lk] = dv_h.reshape(hk, group, lk, dv_h.shape[-1]).sum(axis=1).transpose(1, 0, 2)
        if sink64 is not None:
            dsink -= (np.exp(sink64[:, None] - lse_safe) * dd).sum(axis=1)
    grads = tuple(_from_bshd(g, layout, p.varlen) for g in (dq, dk, dv))
    if sink64 is not None:
        grads = (*grads, dsink)
    if return_dbias:
        grads = (*grads, sum_to_shape(dbias, np.shape(bias)))
    return grads


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even): inputs a bf16 kernel sees,
    for references and tests without ml_dtypes."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    out = rounded.astype(np.uint32).view(np.float32)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, np.float32(np.nan), out)


def rotary_reference(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, positions: np.ndarray,
                     interleaved: bool = False) -> np.ndarray:
    """Rotary embedding (flash-attention's convention) of x [..., S, H, D] at `positions` [..., S],
    computed in float64 and rounded to x's dtype. cos/sin [S_ro, R/2] rotate the first R columns:
    in pairs (2a, 2a + 1) when interleaved, else (a, a + R/2); the rest are copied."""
    half = cos.shape[1]
    out = x.astype(np.float64)
    c = np.asarray(cos, np.float64)[positions][..., None, :]  # [..., S, 1, R/2]
    s = np.asarray(sin, np.float64)[positions][..., None, :]
    if interleaved:
        a, b = out[..., 0:2 * half:2].copy(), out[..., 1:2 * half:2].copy()
        out[..., 0:2 * half:2], out[..., 1:2 * half:2] = a * c - b * s, a * s + b * c
    else:
        a, b = out[..., :half].copy(), out[..., half:2 * half].copy()
        out[..., :half], out[..., half:2 * half] = a * c - b * s, a * s + b * c
    return out.astype(x.dtype)


def fmha_fwd_kvcache_reference(
    q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, *, cache_seqlens: np.ndarray | int,
    block_table: np.ndarray | None = None, cache_batch_idx: np.ndarray | None = None,
    k: np.ndarray | None = None, v: np.ndarray | None = None, rotary_cos: np.ndarray | None = None,
    rotary_sin: np.ndarray | None = None, rotary_interleaved: bool = False,
    cu_seqlens_q: np.ndarray | None = None, scale: float | None = None, causal: CausalArg = False,
    window: tuple[int, int] = (-1, -1), softcap: float = 0.0, sink: np.ndarray | None = None,
    return_lse: bool = False, alibi_slopes: np.ndarray | None = None,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """The numpy model of `tiledsl.ops.fmha_fwd_kvcache` (flash-attention's
    flash_attn_with_kvcache): appends k/v (rotated when rotary_cos/sin are given) into the caches
    *in place* at rows cache_seqlens[b].., then attends q (rotated at positions cache_seqlens[b] +
    i when causal or windowed, else all at cache_seqlens[b]) to each sequence's
    cache_seqlens[b] + S_new keys, with fmha_fwd_reference's conventions (causal: bottom-right).
    Caches: contiguous [B_cache, S_cache, Hk, D] (sequence b in entry cache_batch_idx[b], default
    b) or paged [pages, page_size, Hk, D] with block_table [B, max_pages] (key j of sequence b in
    page block_table[b, j // page_size], slot j % page_size). q: [B, Sq, Hq, D], or packed
    [total_q, Hq, D] with cu_seqlens_q. alibi_slopes [Hq] or [B, Hq]: ALiBi over each sequence's
    cache_seqlens[b] + S_new keys. Returns out (float64) [and the LSE] like fmha_fwd_reference."""
    varlen = cu_seqlens_q is not None
    if varlen:
        cu_q = np.asarray(cu_seqlens_q, np.int64)
        qp = q
    else:
        cu_q = np.arange(q.shape[0] + 1, dtype=np.int64) * q.shape[1]
        qp = q.reshape(-1, *q.shape[2:])
    batch = len(cu_q) - 1
    seqlens = np.broadcast_to(np.asarray(cache_seqlens, np.int64), (batch,))
    s_new = 0 if k is None else k.shape[1]
    page = k_cache.shape[1]

    def where(b: int, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # cache (entry, row) of key j
        if block_table is not None:
            return np.asarray(block_table)[b, j // page], j % page
        entry = b if cache_batch_idx is None else int(np.asarray(cache_batch_idx)[b])
        return np.full_like(j, entry), j

    rotate = rotary_cos is not None
    if k is not None:
        for b in range(batch):
            rows = seqlens[b] + np.arange(s_new)
            kb = k[b][None]
            if rotate:
                kb = rotary_reference(kb, rotary_cos, rotary_sin, rows[None], rotary_interleaved)
            e, r = where(b, rows)
            k_cache[e, r] = kb[0]
            v_cache[e, r] = v[b]
    mask = fmha_mask_params(causal, window)
    ks, vs, cu_k = [], [], [0]
    q_all = np.array(qp, np.float64)  # packed rows past the last sequence stay: out 0, LSE -inf
    for b in range(batch):
        n = int(seqlens[b]) + s_new
        e, r = where(b, np.arange(n))
        ks.append(k_cache[e, r])
        vs.append(v_cache[e, r])
        cu_k.append(cu_k[-1] + n)
        qb = qp[cu_q[b]:cu_q[b + 1]]
        if rotate:
            per_row = mask.kind != "none"
            pos = seqlens[b] + (np.arange(len(qb)) if per_row else np.zeros(len(qb), np.int64))
            qb = rotary_reference(qb[None], rotary_cos, rotary_sin, pos[None], rotary_interleaved)[0]
        q_all[cu_q[b]:cu_q[b + 1]] = qb
    result = fmha_fwd_reference(q_all, np.concatenate(ks), np.concatenate(vs), scale=scale,
                                causal=causal, window=window, softcap=softcap, sink=sink, cu_seqlens_q=cu_q,
                                cu_seqlens_k=np.asarray(cu_k), return_lse=True, alibi_slopes=alibi_slopes)
    out, lse = result
    if not varlen:
        out = out.reshape(q.shape[0], q.shape[1], *out.shape[1:])
        lse = lse.reshape(lse.shape[0], q.shape[0], q.shape[1]).transpose(1, 0, 2)
    return (out, lse) if return_lse else out


# -- random bits ----------------------------------------------------------------------------------
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)


def philox4x32(key: tuple[Any, Any], counter: tuple[Any, Any, Any, Any]) -> tuple[np.ndarray, ...]:
    """Philox-4x32-10 (Salmon et al., SC'11) on uint32 arrays (any shapes that broadcast): the 4
    output words for (key, counter). The kernel language's `philox(key0, key1, c0, c1, c2, c3,
    word)` computes the same words (int32 values with the same bits)."""
    mask = np.uint64(0xFFFFFFFF)
    k0, k1 = (np.asarray(k, np.int64).astype(np.uint64) & mask for k in key)
    c0, c1, c2, c3 = (np.asarray(c, np.int64).astype(np.uint64) & mask for c in counter)
    for r in range(10):
        p0, p1 = np.uint64(_PHILOX_M[0]) * c0, np.uint64(_PHILOX_M[1]) * c2
        hi0, lo0, hi1, lo1 = p0 >> np.uint64(32), p0 & mask, p1 >> np.uint64(32), p1 & mask
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        if r < 9:
            k0, k1 = (k0 + np.uint64(_PHILOX_W[0])) & mask, (k1 + np.uint64(_PHILOX_W[1])) & mask
    return tuple(np.broadcast_arrays(*(w.astype(np.uint32) for w in (c0, c1, c2, c3))))


def philox_byte(key: tuple[Any, Any], j: Any, i: Any, c2: Any, c3: Any) -> np.ndarray:
    """Byte (j mod 4) of word (i mod 4) of Philox-4x32-10 for (key, counter (j >> 2, i >> 2, c2,
    c3)), as uint32 values 0..255 (any shapes that broadcast): one Philox call serves a 4 x 4 block
    of (j, i). The kernel language's `philox_byte(key0, key1, j, i, c2, c3)` computes the same."""
    j = np.asarray(j, np.int64) & 0xFFFFFFFF
    i = np.asarray(i, np.int64) & 0xFFFFFFFF
    words = philox4x32(key, (j >> 2, i >> 2, c2, c3))
    word = np.choose(np.broadcast_to(i & 3, words[0].shape), words).astype(np.uint64)
    return ((word >> (8 * (j & 3)).astype(np.uint64)) & np.uint64(0xFF)).astype(np.uint32)


DROPOUT_LEVELS = 256  # the keep test compares one random byte (8 bits, as flash-attention and CK)


def dropout_threshold(p: float) -> int:
    """The 8-bit threshold of dropout probability p: an element is dropped when its random byte
    is below it, so p is rounded down to a multiple of 1/256 (dropout_keep_scale rescales by
    what is kept)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout_p: expected 0 <= p < 1, got {p!r}")
    return int(p * DROPOUT_LEVELS)


def dropout_keep_scale(p: float) -> float:
    """1 / (probability of keeping an element): the rescale of the kept ones."""
    return DROPOUT_LEVELS / (DROPOUT_LEVELS - dropout_threshold(p))


def dropout_keep_mask(seed: int, offset: int, batch: int, nhead: int, seqlen_q: int, seqlen_k: int,
                      p: float) -> np.ndarray:
    """The dropout keep mask, bool [batch, nhead, seqlen_q, seqlen_k] (group mode: batch is the
    sequence index and the rows and columns are the sequence's own). Element (b, h, i, j) takes
    `philox_byte((seed & 0xFFFFFFFF, seed >> 32), j, i, b * nhead + h, offset)` -- byte j mod 4 of
    word i mod 4 of Philox-4x32-10 with counter (j >> 2, i >> 2, b * nhead + h, offset), one call
    per 4 x 4 block of (key, row) -- and is kept when it is at least dropout_threshold(p). The
    kernels regenerate exactly these bits (never a stored mask)."""
    return np.stack([sequence_keep_mask(seed, offset, b, nhead, seqlen_q, seqlen_k, p) for b in range(batch)]) \
        if batch else np.zeros((0, nhead, seqlen_q, seqlen_k), np.bool_)


def sequence_keep_mask(seed: int, offset: int, b: int, nhead: int, seqlen_q: int, seqlen_k: int,
                       p: float) -> np.ndarray:
    """dropout_keep_mask of sequence (batch index) b alone: bool [nhead, seqlen_q, seqlen_k]."""
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed: expected 0 <= seed < 2**64, got {seed!r}")
    if not 0 <= offset < 2**31:
        raise ValueError(f"offset: expected 0 <= offset < 2**31, got {offset!r}")
    threshold = dropout_threshold(p)
    j = np.arange(seqlen_k)[None, None, :]
    i = np.arange(seqlen_q)[None, :, None]
    bh = (b * nhead + np.arange(nhead))[:, None, None]
    return philox_byte((seed & 0xFFFFFFFF, seed >> 32), j, i, bh, offset).astype(np.int64) >= threshold
