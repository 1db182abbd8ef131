"""The numpy FMHA reference against a naive, loop-by-loop computation of each feature.

The naive model spells every convention out element by element (mask conditions, tanh cap, sink
term, empty rows), independently of the vectorised reference, on small shapes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tiledsl.reference import fmha_fwd_reference, fmha_mask, fmha_mask_params, round_to_bf16


def naive(q, k, v, *, scale=None, causal=False, window=(-1, -1), softcap=0.0, sink=None):
    """Batch mode, bshd. Returns (out [B, Sq, Hq, Dv], lse [B, Hq, Sq]) with Python loops."""
    batch, sq, hq, d = q.shape
    sk, hk, dv = k.shape[1], k.shape[2], v.shape[3]
    scale = 1 / math.sqrt(d) if scale is None else scale
    left, right = window
    if causal:
        right = 0
    top_left = causal == "top_left"
    out = np.zeros((batch, sq, hq, dv))
    lse = np.full((batch, hq, sq), -np.inf)
    for b in range(batch):
        for h in range(hq):
            g = h // (hq // hk)
            for i in range(sq):
                diag = i if top_left else i + sk - sq
                logits, values = [], []
                for j in range(sk):
                    if left >= 0 and j < diag - left:
                        continue
                    if right >= 0 and j > diag + right:
                        continue
                    x = float(np.dot(q[b, i, h].astype(np.float64), k[b, j, g].astype(np.float64))) * scale
                    if softcap > 0:
                        x = softcap * math.tanh(x / softcap)
                    logits.append(x)
                    values.append(v[b, j, g].astype(np.float64))
                terms = logits + ([float(sink[h])] if sink is not None else [])
                if not terms:
                    continue  # out 0, lse -inf
                mx = max(terms)
                denom = sum(math.exp(t - mx) for t in terms)
                acc = sum((math.exp(x - mx) * val for x, val in zip(logits, values, strict=True)),
                          np.zeros(dv))
                out[b, i, h] = acc / denom
                lse[b, h, i] = mx + math.log(denom)
    return out, lse


def make(rng, batch=2, sq=5, sk=7, hq=4, hk=2, d=8, dv=None, dtype=np.float16):
    dv = d if dv is None else dv
    q = rng.standard_normal((batch, sq, hq, d)).astype(dtype)
    k = rng.standard_normal((batch, sk, hk, d)).astype(dtype)
    v = rng.standard_normal((batch, sk, hk, dv)).astype(dtype)
    return q, k, v


def check(q, k, v, **kw):
    want_o, want_lse = naive(q, k, v, **kw)
    got_o, got_lse = fmha_fwd_reference(q, k, v, return_lse=True, **kw)
    np.testing.assert_allclose(got_o, want_o, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_lse, want_lse, rtol=1e-10, atol=1e-12)
    return got_o, got_lse


@pytest.mark.parametrize("sq,sk", [(5, 5), (3, 7), (7, 3)])
@pytest.mark.parametrize("causal", [False, True, "top_left", "bottom_right"])
def test_causal(sq: int, sk: int, causal) -> None:
    q, k, v = make(np.random.default_rng(0), sq=sq, sk=sk)
    check(q, k, v, causal=causal)


@pytest.mark.parametrize("window", [(2, 1), (0, 0), (-1, 2), (3, -1), (1, 4)])
@pytest.mark.parametrize("sq,sk", [(6, 6), (4, 9), (9, 4)])
def test_sliding_window(window: tuple[int, int], sq: int, sk: int) -> None:
    q, k, v = make(np.random.default_rng(1), sq=sq, sk=sk)
    check(q, k, v, window=window)


def test_causal_keeps_left_window_and_ignores_right() -> None:
    q, k, v = make(np.random.default_rng(2), sq=6, sk=8)
    a = fmha_fwd_reference(q, k, v, causal=True, window=(2, 5))
    b = fmha_fwd_reference(q, k, v, window=(2, 0))
    np.testing.assert_array_equal(a, b)
    check(q, k, v, causal="top_left", window=(1, -1))


def test_mask_conventions() -> None:
    # flash-attention: bottom-right causal with seqlen_q > seqlen_k leaves the first rows empty.
    m = fmha_mask(4, 2, fmha_mask_params(True))
    assert m.tolist() == [[False, False], [False, False], [True, False], [True, True]]
    m = fmha_mask(2, 4, fmha_mask_params("top_left"))
    assert m.tolist() == [[True, False, False, False], [True, True, False, False]]
    m = fmha_mask(2, 4, fmha_mask_params(True))
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]
    assert fmha_mask_params(False, (-1, -1)).kind == "none"
    assert fmha_mask_params(False, (3, 0)) == fmha_mask_params(False, (3, 0))
    with pytest.raises(ValueError):
        fmha_mask_params(False, (-2, 0))


def test_fully_masked_rows_give_zero_and_minus_inf() -> None:
    q, k, v = make(np.random.default_rng(3), sq=6, sk=3)
    o, lse = check(q, k, v, causal=True)
    assert np.all(o[:, :3] == 0) and np.all(np.isneginf(lse[:, :, :3]))
    assert np.all(np.isfinite(lse[:, :, 3:]))
    # No key at all.
    q, k, v = make(np.random.default_rng(3), sq=3, sk=0)
    o, lse = check(q, k, v)
    assert np.all(o == 0) and np.all(np.isneginf(lse))


def test_nan_inputs_give_nan_rows_not_masked_ones() -> None:
    """A NaN in a query row makes that row's output and LSE NaN (as the kernels do); it is not a
    row without keys (0 and -inf), which the denominator test took it for."""
    q, k, v = make(np.random.default_rng(5), sq=4, sk=5)
    q[0, 2, 0, 1] = np.nan
    o, lse = fmha_fwd_reference(q, k, v, return_lse=True)
    assert np.isnan(o[0, 2, 0]).all() and np.isnan(lse[0, 0, 2])
    clean = np.delete(np.arange(4), 2)
    assert np.isfinite(o[0, clean]).all() and np.isfinite(lse[0, 0, clean]).all()


def test_scale_and_head_dims() -> None:
    rng = np.random.default_rng(4)
    check(*make(rng, d=12, dv=6), scale=0.3)
    check(*make(rng, d=8, dv=16))  # Dv > D, as in 192/128 padded the other way round


@pytest.mark.parametrize("hq,hk", [(4, 4), (4, 2), (6, 1)])
def test_gqa_mqa(hq: int, hk: int) -> None:
    check(*make(np.random.default_rng(5), hq=hq, hk=hk), causal=True)


def test_softcap() -> None:
    rng = np.random.default_rng(6)
    q, k, v = make(rng, dtype=np.float32)
    o, _ = check(q * 4, k * 4, v, softcap=2.0)
    plain = fmha_fwd_reference(q * 4, k * 4, v)
    assert not np.allclose(o, plain)  # the cap is active at these magnitudes
    # A huge cap is no cap.
    np.testing.assert_allclose(fmha_fwd_reference(q, k, v, softcap=1e6), fmha_fwd_reference(q, k, v),
                               rtol=1e-8)


def test_sink() -> None:
    rng = np.random.default_rng(7)
    q, k, v = make(rng)
    sink = rng.standard_normal(4)
    check(q, k, v, sink=sink)
    check(q, k, v, sink=sink, causal=True, window=(1, -1))
    # A row with every key masked: output 0, LSE = the sink logit.
    q, k, v = make(rng, sq=5, sk=2)
    o, lse = check(q, k, v, sink=sink, causal=True)
    assert np.all(o[:, :3] == 0)
    np.testing.assert_allclose(lse[:, :, :3], np.broadcast_to(sink[None, :, None], (2, 4, 3)))
    # A sink of -inf changes nothing.
    np.testing.assert_allclose(fmha_fwd_reference(q, k, v, sink=np.full(4, -np.inf)),
                               fmha_fwd_reference(q, k, v), rtol=1e-12)


def test_layout_bhsd() -> None:
    q, k, v = make(np.random.default_rng(8))
    want, want_lse = fmha_fwd_reference(q, k, v, causal=True, return_lse=True)
    t = (0, 2, 1, 3)
    got, got_lse = fmha_fwd_reference(q.transpose(t), k.transpose(t), v.transpose(t), causal=True,
                                      return_lse=True, layout="bhsd")
    np.testing.assert_array_equal(got.transpose(t), want)
    np.testing.assert_array_equal(got_lse, want_lse)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_group_mode_matches_per_sequence(layout: str) -> None:
    rng = np.random.default_rng(9)
    lens_q, lens_k = [3, 0, 5, 2], [4, 2, 6, 0]
    cu_q, cu_k = np.cumsum([0, *lens_q]), np.cumsum([0, *lens_k])
    hq, hk, d = 4, 2, 8
    q = rng.standard_normal((cu_q[-1], hq, d))
    k = rng.standard_normal((cu_k[-1], hk, d))
    v = rng.standard_normal((cu_k[-1], hk, d))
    sink = rng.standard_normal(hq)
    kw = dict(causal=True, window=(2, -1), softcap=3.0, sink=sink)
    t = (1, 0, 2)
    args = (q, k, v) if layout == "bshd" else (q.transpose(t), k.transpose(t), v.transpose(t))
    out, lse = fmha_fwd_reference(*args, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True,
                                  layout=layout, **kw)
    if layout == "bhsd":
        out = out.transpose(t)
    assert out.shape == (cu_q[-1], hq, d) and lse.shape == (hq, cu_q[-1])
    for b in range(len(lens_q)):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        want_o, want_lse = naive(q[None, qs], k[None, ks], v[None, ks], **kw)
        np.testing.assert_allclose(out[qs], want_o[0], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(lse[:, qs], want_lse[0], rtol=1e-10, atol=1e-12)


def test_all_features_together() -> None:
    rng = np.random.default_rng(10)
    q, k, v = make(rng, batch=2, sq=6, sk=9, hq=6, hk=2, d=8, dv=4)
    check(q, k, v, scale=0.5, causal="top_left", window=(3, -1), softcap=5.0, sink=rng.standard_normal(6))


def test_bad_arguments() -> None:
    q, k, v = make(np.random.default_rng(11))
    with pytest.raises(ValueError, match="multiple"):
        fmha_fwd_reference(q, k[:, :, :1].repeat(3, axis=2), v[:, :, :1].repeat(3, axis=2))
    with pytest.raises(ValueError, match="layout"):
        fmha_fwd_reference(q, k, v, layout="sbhd")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="both"):
        fmha_fwd_reference(q[0], k[0], v[0], cu_seqlens_q=np.array([0, 5]))
    with pytest.raises(ValueError, match="causal"):
        fmha_fwd_reference(q, k, v, causal="diagonal")  # type: ignore[arg-type]


def test_round_to_bf16() -> None:
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -3.14159, np.inf, 0.0], dtype=np.float32)
    got = round_to_bf16(x)
    # ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 and rounds down to 1.
    assert got[0] == 1.0 and got[1] == 1.0 and got[2] == 1.0 + 2**-6
    assert got[3] == np.float32(-3.140625) and np.isinf(got[4]) and got[5] == 0.0
    assert np.isnan(round_to_bf16(np.array([np.nan], dtype=np.float32))[0])
    assert np.all(round_to_bf16(x).view(np.uint32) & 0xFFFF == 0)
