"""fmha_bwd_reference against central finite differences of the forward reference (float64)."""

from __future__ import annotations

import numpy as np
import pytest

from tiledsl.reference import fmha_bwd_reference, fmha_fwd_reference

pytestmark = pytest.mark.frontend


def numeric_grads(do, q, k, v, sink=None, eps=1e-6, **opts):
    """d/dx of sum(do * out) for x in q, k, v (and sink), by central differences."""
    def loss(q_, k_, v_, sink_):
        return float(np.sum(do * fmha_fwd_reference(q_, k_, v_, sink=sink_, **opts)))

    args = [q, k, v] + ([sink] if sink is not None else [])
    grads = []
    for i, x in enumerate(args):
        g = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            hi, lo = [a.copy() for a in args], [a.copy() for a in args]
            hi[i][idx] += eps
            lo[i][idx] -= eps
            pad = [None] if sink is None else []
            g[idx] = (loss(*hi, *pad) - loss(*lo, *pad)) / (2 * eps)
        grads.append(g)
    return grads


def case(*, b=1, sq=4, sk=5, hq=2, hk=1, d=4, dv=None, varlen=None, layout="bshd", seed=0):
    rng = np.random.default_rng(seed)
    dv = d if dv is None else dv
    if varlen is not None:
        tq, tk = varlen
        shapes = [(tq, hq, dv), (tq, hq, d), (tk, hk, d), (tk, hk, dv)]
    else:
        shapes = [(b, sq, hq, dv), (b, sq, hq, d), (b, sk, hk, d), (b, sk, hk, dv)]
    arrays = [rng.standard_normal(s) for s in shapes]
    if layout == "bhsd":
        arrays = [np.swapaxes(a, -3, -2).copy() for a in arrays]
    return arrays


@pytest.mark.parametrize("opts, shape", [
    ({}, {}),
    ({"causal": True}, {"sq": 3, "sk": 5}),
    ({"causal": True}, {"sq": 5, "sk": 3}),  # the first two rows see no key
    ({"causal": "top_left"}, {"b": 2}),
    ({"window": (1, 0)}, {}),
    ({"window": (2, 1)}, {"sq": 5, "sk": 4}),
    ({"softcap": 2.0, "scale": 0.9}, {}),
    ({"layout": "bhsd"}, {"layout": "bhsd", "hq": 4, "hk": 2}),
    ({}, {"hq": 3, "hk": 1, "dv": 3}),
    ({"cu_seqlens_q": np.array([0, 2, 2, 5]), "cu_seqlens_k": np.array([0, 3, 4, 6]), "causal": True},
     {"varlen": (5, 6)}),
])
def test_reference_backward_matches_finite_differences(opts, shape):
    do, q, k, v = case(**shape)
    got = fmha_bwd_reference(do, q, k, v, **opts)
    want = numeric_grads(do, q, k, v, **opts)
    for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-6, rtol=1e-5, err_msg=name)


def test_reference_backward_with_sink():
    do, q, k, v = case(sq=4, sk=4, hq=2, hk=2, seed=3)
    sink = np.array([0.3, -0.7])
    got = fmha_bwd_reference(do, q, k, v, sink=sink, causal=True)
    want = numeric_grads(do, q, k, v, sink=sink, causal=True)
    assert len(got) == 4
    for name, g, w in zip(("dq", "dk", "dv", "dsink"), got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-6, rtol=1e-5, err_msg=name)


def test_fully_masked_rows_have_zero_finite_gradients():
    do, q, k, v = case(sq=5, sk=2, seed=4)
    dq, dk, dv = fmha_bwd_reference(do, q, k, v, causal=True)  # rows 0..2 see no key
    assert np.isfinite(dq).all() and np.isfinite(dk).all() and np.isfinite(dv).all()
    assert not dq[:, :3].any()


def test_group_mode_sequence_without_keys():
    """A sequence with no keys gets zero dq and is skipped, not a numpy reshape error (GQA: the
    per-head gradients fold over an empty key axis). The other sequences match their own call."""
    rng = np.random.default_rng(5)
    cq, ck = np.array([0, 3, 3, 7]), np.array([0, 0, 4, 6])
    do, q = (rng.standard_normal((7, 4, 8)) for _ in range(2))
    k, v = (rng.standard_normal((6, 2, 8)) for _ in range(2))
    dq, dk, dv = fmha_bwd_reference(do, q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, causal=True)
    assert not dq[:3].any()
    alone = fmha_bwd_reference(do[None, 3:7], q[None, 3:7], k[None, 4:6], v[None, 4:6], causal=True)
    np.testing.assert_allclose(dq[3:7], alone[0][0])
    np.testing.assert_allclose(dk[4:6], alone[1][0])
    np.testing.assert_allclose(dv[4:6], alone[2][0])


def numeric_grad(f, x, eps=1e-6):
    """d f / d x by central differences (f a function of x alone)."""
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[idx] += eps
        lo[idx] -= eps
        g[idx] = (f(hi) - f(lo)) / (2 * eps)
    return g


@pytest.mark.parametrize("opts, shape, bias_shape", [
    ({}, {}, (1, 2, 4, 5)),  # broadcast over the batch
    ({"causal": True, "softcap": 2.0}, {"b": 2, "sq": 3, "sk": 5, "hq": 2, "hk": 1}, (2, 1, 3, 5)),  # over heads
    ({"window": (1, 1)}, {"sq": 4, "sk": 4}, (4, 4)),  # over batch and heads (numpy broadcasting)
    ({"causal": "top_left", "layout": "bhsd"}, {"b": 2, "layout": "bhsd"}, (2, 2, 1, 5)),  # over query rows
    ({"cu_seqlens_q": np.array([0, 2, 2, 5]), "cu_seqlens_k": np.array([0, 3, 4, 6]), "causal": True},
     {"varlen": (5, 6)}, (2, 5, 4)),  # group mode: [Hq, total_q, >= max seqlen_k]
])
def test_reference_backward_with_bias_matches_finite_differences(opts, shape, bias_shape):
    do, q, k, v = case(**shape, seed=5)
    bias = np.random.default_rng(6).standard_normal(bias_shape)
    got = fmha_bwd_reference(do, q, k, v, bias=bias, return_dbias=True, **opts)
    want = numeric_grads(do, q, k, v, bias=bias, **opts)
    for name, g, w in zip(("dq", "dk", "dv"), got[:3], want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-6, rtol=1e-5, err_msg=name)
    dbias = numeric_grad(lambda b: float(np.sum(do * fmha_fwd_reference(q, k, v, bias=b, **opts))), bias)
    assert got[3].shape == bias.shape
    np.testing.assert_allclose(got[3], dbias, atol=1e-6, rtol=1e-5, err_msg="dbias")


@pytest.mark.parametrize("opts", [{"causal": True}, {"window": (2, 0), "softcap": 3.0}, {}])
def test_reference_backward_with_alibi_matches_finite_differences(opts):
    do, q, k, v = case(b=2, sq=4, sk=6, hq=2, hk=1, seed=7)
    slopes = np.array([[0.5, 0.25], [1.0, 0.125]])  # [B, Hq]
    got = fmha_bwd_reference(do, q, k, v, alibi_slopes=slopes, **opts)
    want = numeric_grads(do, q, k, v, alibi_slopes=slopes, **opts)
    for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-6, rtol=1e-5, err_msg=name)


def test_reference_alibi_is_the_bias_it_stands_for():
    """ALiBi is the bias -slope * |i + Sk - Sq - j| (bottom-right aligned), LSE included."""
    rng = np.random.default_rng(8)
    do, q, k, v = case(b=2, sq=3, sk=5, hq=2, hk=2, seed=9)
    slopes = rng.uniform(0.1, 1.0, 2)
    i, j = np.arange(3)[:, None], np.arange(5)[None, :]
    bias = -slopes[:, None, None] * np.abs(i + 5 - 3 - j)
    for causal in (False, "top_left"):
        a = fmha_fwd_reference(q, k, v, alibi_slopes=slopes, causal=causal, return_lse=True)
        b = fmha_fwd_reference(q, k, v, bias=bias, causal=causal, return_lse=True)
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(x, y, atol=1e-12)
    with pytest.raises(ValueError, match="bias and alibi_slopes: give at most one"):
        fmha_fwd_reference(q, k, v, bias=bias, alibi_slopes=slopes)
    with pytest.raises(ValueError, match="bias: expected a shape broadcastable to"):
        fmha_fwd_reference(q, k, v, bias=np.zeros((2, 2, 3, 4)))


@pytest.mark.parametrize("opts", [
    {"causal": True},
    {"softcap": 3.0, "sink": np.array([0.5, -1.0])},
    {"cu_seqlens_q": np.array([0, 2, 2, 5]), "cu_seqlens_k": np.array([0, 3, 4, 6]), "window": (2, 1)},
])
def test_reference_backward_with_dropout_matches_finite_differences(opts):
    """With dropout the keep bits are fixed by (seed, offset), so the forward is differentiable
    and its finite differences check the dropped backward (dsink included)."""
    opts = {**opts, "dropout_p": 0.4, "seed": 2**35 + 9, "offset": 2}
    varlen = (5, 6) if "cu_seqlens_q" in opts else None
    do, q, k, v = case(b=2, sq=4, sk=6, hq=2, hk=1, seed=8, varlen=varlen)
    sink = opts.pop("sink", None)
    got = fmha_bwd_reference(do, q, k, v, sink=sink, **opts)
    want = numeric_grads(do, q, k, v, sink=sink, **opts)
    assert len(got) == len(want) == (3 if sink is None else 4)
    for name, g, w in zip(("dq", "dk", "dv", "dsink"), got, want, strict=False):
        np.testing.assert_allclose(g, w, atol=1e-6, rtol=1e-5, err_msg=name)
    # The drop is live: the gradients differ from those without it.
    plain = fmha_bwd_reference(do, q, k, v, sink=sink, **{n: x for n, x in opts.items() if n != "dropout_p"})
    assert np.abs(plain[2] - got[2]).max() > 1e-2
