"""tiledsl.torch: flash-attention's API over tiledsl, on CPU tensors (the emulator) and, through the
HIP stand-in, on the path ROCm tensors take. Outputs and gradients are checked against torch
float64 autograd of plain attention (softmax(Q K^T * scale + mask) V, GQA by repeating heads)."""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: `make test-torch` installs it and runs these")

import tiledsl.torch as tt  # noqa: E402
from tiledsl.reference import fmha_fwd_kvcache_reference  # noqa: E402

pytestmark = pytest.mark.emulator

F16, BF16 = torch.float16, torch.bfloat16


# -- the float64 model ------------------------------------------------------------------------

def attention64(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, scale=None, alibi=None):
    """Plain attention of float64 tensors [B, S, H, D] (differentiable): bottom-right aligned
    causal mask and window, tanh soft-cap, GQA by repeating each kv head Hq/Hk times."""
    g = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    sq, sk = q.shape[1], k.shape[1]
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    if alibi is not None:  # flash-attention's ALiBi: -slope * |i + sk - sq - j|, after the soft-cap
        slopes = alibi.double().reshape(-1 if alibi.dim() == 2 else 1, q.shape[2])
        s = s - slopes[:, :, None, None] * (i + sk - sq - j).abs().double()
    left, right = window[0], 0 if causal else window[1]
    allowed = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        allowed &= j >= i + sk - sq - left
    if right >= 0:
        allowed &= j <= i + sk - sq + right
    s = s.masked_fill(~allowed, float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), v)


def reference(q, k, v, do, cu_q=None, cu_k=None, **opts):
    """(out, (dq, dk, dv)) in float64 through torch autograd; packed sequences with cu_q/cu_k."""
    q, k, v = (x.detach().double().requires_grad_() for x in (q, k, v))
    if cu_q is None:
        out = attention64(q, k, v, **opts)
    else:
        out = torch.cat([attention64(q[None, a:b], k[None, c:e], v[None, c:e], **opts)[0]
                         for a, b, c, e in zip(cu_q[:-1], cu_q[1:], cu_k[:-1], cu_k[1:], strict=True)])
    out.backward(do.double())
    return out.detach(), (q.grad, k.grad, v.grad)


def assert_close(got, ref, dtype, name):
    """Max error within 4e-3 (f16) or 2e-2 (bf16) of the reference's largest magnitude (at least
    1), as tests/test_fmha_bwd.py holds the backward to."""
    tol = 2e-2 if dtype == BF16 else 4e-3
    assert got.shape == ref.shape and got.dtype == dtype, name
    g = got.detach().double()
    assert torch.isfinite(g).all(), f"{name} has non-finite values"
    err = (g - ref).abs().max().item() if ref.numel() else 0.0
    assert err <= tol * max(ref.abs().max().item() if ref.numel() else 0.0, 1.0), f"{name}: max error {err}"


def randn(*shape, dtype=F16, grad=False):
    return torch.randn(*shape, dtype=torch.float32).to(dtype).requires_grad_(grad)


def check_fwd_bwd(fn, q, k, v, cu_q=None, cu_k=None, **opts):
    """Run fn (forward, then backward of a random output gradient) and compare with the model."""
    out = fn(q, k, v)
    do = torch.randn(out.shape).to(q.dtype)
    out.backward(do)
    ref_out, ref_grads = reference(q, k, v, do, cu_q, cu_k, **opts)
    assert_close(out, ref_out, q.dtype, "out")
    for name, x, r in zip(("dq", "dk", "dv"), (q, k, v), ref_grads, strict=True):
        assert_close(x.grad, r, q.dtype, name)
    return out


# -- flash_attn_func and flash_attn_varlen_func on the emulator --------------------------------

@pytest.mark.parametrize("arch,dtype", [("gfx942", F16), ("gfx1100", BF16)])
def test_func_causal_gqa_odd_lengths(arch, dtype):
    torch.manual_seed(1)
    q, k, v = randn(2, 37, 4, 64, dtype=dtype, grad=True), *(randn(2, 53, 2, 64, dtype=dtype, grad=True)
                                                               for _ in range(2))
    out = check_fwd_bwd(lambda q, k, v: tt.flash_attn_func(q, k, v, causal=True, deterministic=True, arch=arch),
                        q, k, v, causal=True)
    assert out.grad_fn is not None and out.shape == (2, 37, 4, 64)


@pytest.mark.parametrize("arch,dtype", [("gfx942", BF16), ("gfx1100", F16)])
def test_func_window_softcap_scale_strided(arch, dtype):
    """A sliding window, soft-cap and an explicit scale; q and k are views of [B, H, S, D]
    tensors (non-contiguous: they reach tiledsl as strided views, not copies)."""
    torch.manual_seed(2)
    qt = randn(1, 2, 45, 48, dtype=dtype).transpose(1, 2).detach().requires_grad_()
    kt = randn(1, 1, 60, 48, dtype=dtype).transpose(1, 2).detach().requires_grad_()
    v = randn(1, 60, 1, 48, dtype=dtype, grad=True)
    assert not qt.is_contiguous()
    opts = dict(window=(16, 8), softcap=5.0, scale=0.2)

    def fn(q, k, v):
        return tt.flash_attn_func(q, k, v, softmax_scale=0.2, window_size=(16, 8), softcap=5.0, arch=arch)

    check_fwd_bwd(fn, qt, kt, v, **opts)


@pytest.mark.parametrize("arch,dtype", [("gfx942", F16), ("gfx1100", BF16)])
def test_varlen_causal_gqa_with_an_empty_sequence(arch, dtype):
    torch.manual_seed(3)
    cu_q, cu_k = [0, 17, 17, 50], [0, 30, 41, 90]
    q = randn(50, 4, 64, dtype=dtype, grad=True)
    k, v = (randn(90, 1, 64, dtype=dtype, grad=True) for _ in range(2))

    def fn(q, k, v):
        return tt.flash_attn_varlen_func(q, k, v, torch.tensor(cu_q, dtype=torch.int32),
                                         torch.tensor(cu_k, dtype=torch.int32), 33, 49, causal=True, arch=arch)

    check_fwd_bwd(fn, q, k, v, cu_q, cu_k, causal=True)


def test_grads_only_for_inputs_that_require_them_and_no_graph_without_grad():
    torch.manual_seed(4)
    q = randn(1, 20, 2, 32, grad=True)
    k, v = randn(1, 24, 2, 32), randn(1, 24, 2, 32)
    out = tt.flash_attn_func(q, k, v, arch="gfx942")
    out.sum().backward()  # an expanded (stride 0) output gradient
    assert q.grad is not None and k.grad is None and v.grad is None
    ref_out, (dq, _, _) = reference(q, k, v, torch.ones(out.shape))
    assert_close(q.grad, dq, F16, "dq")
    with torch.no_grad():
        plain = tt.flash_attn_func(q, k, v, arch="gfx942")
    assert plain.grad_fn is None and not plain.requires_grad
    assert torch.equal(plain, out.detach())


def test_bf16_and_strided_tensors_reach_tiledsl_without_copies():
    t = torch.randn(2, 3, 5, 8).to(BF16).transpose(1, 2)  # non-contiguous bf16
    a = tt._host_view(t)
    assert a.dtype.name == "bfloat16" and a.shape == tuple(t.shape)
    assert a.ctypes.data == t.data_ptr() and a.strides == tuple(2 * s for s in t.stride())
    np.testing.assert_array_equal(a.astype(np.float32), t.float().numpy())
    back = tt._from_host(a)
    assert back.dtype == BF16 and back.data_ptr() == t.data_ptr() and torch.equal(back, t)


# -- flash_attn_with_kvcache -------------------------------------------------------------------

def test_kvcache_paged_decode_with_append_gqa():
    """Decode (Sq = 1) against a paged cache in shuffled pages of 16, appending one row per
    sequence in place, GQA 4:1, causal, f16, LSE returned: against the float64 model over the
    cache as it is after the append."""
    torch.manual_seed(5)
    pages, page, hk, hq, d = 12, 16, 1, 4, 64
    kc, vc = randn(pages, page, hk, d), randn(pages, page, hk, d)
    kc0, vc0 = kc.clone(), vc.clone()
    table = torch.randperm(pages)[:10].reshape(2, 5).to(torch.int32)
    seqlens = torch.tensor([20, 63], dtype=torch.int32)
    q = randn(2, 1, hq, d)
    k, v = randn(2, 1, hk, d), randn(2, 1, hk, d)
    out, lse = tt.flash_attn_with_kvcache(q, kc, vc, k=k, v=v, cache_seqlens=seqlens, block_table=table,
                                          causal=True, return_softmax_lse=True, arch="gfx942")
    assert out.shape == (2, 1, hq, d) and lse.shape == (2, hq, 1) and lse.dtype == torch.float32
    for b in range(2):
        n = int(seqlens[b])
        p, slot = int(table[b, n // page]), n % page
        assert torch.equal(kc[p, slot], k[b, 0]) and torch.equal(vc[p, slot], v[b, 0])  # appended in place
        keys = torch.cat([kc[int(i)] for i in table[b]])[:n + 1][None].double()
        vals = torch.cat([vc[int(i)] for i in table[b]])[:n + 1][None].double()
        ref = attention64(q[b:b + 1].double(), keys, vals, causal=True)
        assert_close(out[b:b + 1], ref, F16, f"out[{b}]")
        s = torch.einsum("qhd,khd->hqk", q[b].double(), keys[0].repeat_interleave(hq // hk, 1)) / math.sqrt(d)
        torch.testing.assert_close(lse[b].double(), torch.logsumexp(s, -1), atol=1e-4, rtol=1e-5)
    changed = (kc != kc0).any(dim=(1, 2, 3)).sum().item()
    assert changed == 2 and (vc != vc0).any(dim=(1, 2, 3)).sum().item() == 2  # only the two appended rows


def test_kvcache_contiguous_rotary_batch_idx_bf16():
    """A contiguous cache with cache_batch_idx, an append with (interleaved, flash-attention's
    default) rotary embedding, a window and soft-cap, bf16: against tiledsl's numpy model of
    flash_attn_with_kvcache, which the kvcache tests hold to the float64 definition."""
    torch.manual_seed(6)
    kc, vc = randn(3, 96, 2, 64, dtype=BF16), randn(3, 96, 2, 64, dtype=BF16)
    q, k, v = randn(2, 3, 4, 64, dtype=BF16), randn(2, 3, 2, 64, dtype=BF16), randn(2, 3, 2, 64, dtype=BF16)
    ang = torch.rand(128, 16, dtype=torch.float64) * 6
    seqlens, idx = torch.tensor([0, 70], dtype=torch.int32), torch.tensor([2, 0], dtype=torch.int32)
    host = {n: tt._host_view(x).copy() for n, x in (("kc", kc), ("vc", vc), ("q", q), ("k", k), ("v", v))}
    ref = fmha_fwd_kvcache_reference(host["q"], host["kc"], host["vc"], k=host["k"], v=host["v"],
                                     cache_seqlens=seqlens.numpy(), cache_batch_idx=idx.numpy(),
                                     rotary_cos=ang.cos().numpy(), rotary_sin=ang.sin().numpy(),
                                     rotary_interleaved=True, causal=True, window=(40, 0), softcap=20.0)
    out = tt.flash_attn_with_kvcache(q, kc, vc, k, v, ang.cos(), ang.sin(), cache_seqlens=seqlens,
                                     cache_batch_idx=idx, causal=True, window_size=(40, 0), softcap=20.0,
                                     arch="gfx1100")
    np.testing.assert_allclose(out.float().numpy(), ref, atol=2e-2, rtol=2e-2)
    np.testing.assert_allclose(kc.float().numpy(), host["kc"].astype(np.float32), atol=1e-2, rtol=1e-2)
    assert np.array_equal(tt._host_view(vc), host["vc"])


def test_varlen_over_a_paged_cache_is_forward_only():
    """flash_attn_varlen_func with block_table: batch prefill against the pages (no grad)."""
    torch.manual_seed(7)
    kc, vc = randn(8, 32, 2, 32), randn(8, 32, 2, 32)
    table = torch.tensor([[3, 0, 5], [7, 1, 2]], dtype=torch.int32)
    cu_q, cu_k = torch.tensor([0, 5, 12], dtype=torch.int32), torch.tensor([0, 70, 100], dtype=torch.int32)
    q = randn(12, 4, 32)
    out = tt.flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, 7, 70, causal=True, block_table=table, arch="gfx942")
    for b, (a, e, n) in enumerate([(0, 5, 70), (5, 12, 30)]):
        keys = torch.cat([kc[int(i)] for i in table[b]])[:n][None].double()
        vals = torch.cat([vc[int(i)] for i in table[b]])[:n][None].double()
        assert_close(out[a:e][None], attention64(q[None, a:e].double(), keys, vals, causal=True), F16, f"seq {b}")
    with pytest.raises(NotImplementedError, match="block_table: the backward"):
        tt.flash_attn_varlen_func(q.requires_grad_(), kc, vc, cu_q, cu_k, 7, 70, block_table=table, arch="gfx942")


# -- device selection and errors ---------------------------------------------------------------

def test_default_device_setting_and_context():
    q = randn(1, 8, 1, 32)
    with pytest.raises(ValueError, match=r"^arch: .*gfx942.*set_default_device"):
        tt.flash_attn_func(q, q, q)
    assert tt.get_default_device() is None
    with tt.use_device("emulator:gfx1100") as dev:
        assert dev.arch.name == "gfx1100"
        out = tt.flash_attn_func(q, q, q)
        with pytest.raises(ValueError, match="arch: gfx942 does not match"):
            tt.flash_attn_func(q, q, q, device=dev, arch="gfx942")
    assert tt.get_default_device() is None
    torch.testing.assert_close(out, tt.flash_attn_func(q, q, q, device="emulator:gfx1100"), atol=0, rtol=0)
    previous = tt.set_default_device("emulator:gfx942")
    try:
        assert previous is None and tt.get_default_device().arch.name == "gfx942"
    finally:
        tt.set_default_device(None)


@pytest.mark.parametrize("call,error,match", [
    (lambda q: tt.flash_attn_func(q, q, q, dropout_p=1.0, arch="gfx942"), ValueError,
     r"dropout_p: expected a float in \[0, 1\)"),
    (lambda q: tt.flash_attn_func(q, q, q, alibi_slopes=torch.ones(2, dtype=torch.float64), arch="gfx942"),
     ValueError, "alibi_slopes: expected a float32 tensor"),
    (lambda q: tt.flash_attn_func(q, q, q, return_attn_probs=True, arch="gfx942"), NotImplementedError,
     "return_attn_probs: .* not in tiledsl yet"),
    (lambda q: tt.flash_attn_with_kvcache(q, q, q, cache_seqlens=4, cache_leftpad=torch.zeros(1, dtype=torch.int32),
                                          arch="gfx942"), NotImplementedError, "cache_leftpad: .* not in tiledsl yet"),
    (lambda q: tt.flash_attn_func(q.float(), q, q, arch="gfx942"), ValueError, "q: expected dtype"),
    (lambda q: tt.flash_attn_func(q, q, q, window_size=(3,), arch="gfx942"), ValueError, "window_size: "),
    (lambda q: tt.flash_attn_func(q, q, q, causal="top_left", arch="gfx942"), ValueError, "causal: "),
    (lambda q: tt.flash_attn_func(q, q, q, softmax_scale=float("nan"), arch="gfx942"), ValueError, "softmax_scale: "),
    (lambda q: tt.flash_attn_func(q, q, q, softcap=-1.0, arch="gfx942"), ValueError, "softcap: "),
    (lambda q: tt.flash_attn_func(q, q, q, deterministic=None, arch="gfx942"), ValueError, "deterministic: "),
    (lambda q: tt.flash_attn_func(q, q, q, arch="gfx9000"), ValueError, "arch: expected one of"),
    (lambda q: tt.flash_attn_func(q, q, q, device="tpu"), ValueError, "device: expected"),
    (lambda q: tt.flash_attn_func(q, q.to("meta"), q, arch="gfx942"), ValueError, "k: on meta"),
    (lambda q: tt.flash_attn_func(q, q.numpy(), q, arch="gfx942"), ValueError, "k: expected a torch.Tensor"),
    (lambda q: tt.flash_attn_func(q, q[:, :, :1, :16], q, arch="gfx942"), ValueError, "k: head dim"),
    (lambda q: tt.flash_attn_varlen_func(q[0], q[0], q[0], torch.tensor([0, 4.0]), torch.tensor([0, 4]), 4, 4,
                                         arch="gfx942"), ValueError, "cu_seqlens_q: expected a 1-D int32"),
    (lambda q: tt.flash_attn_with_kvcache(q, q, q, k=q, v=q, arch="gfx942"), ValueError, "cache_seqlens: needed"),
    # Session 45's sweep: a float max_seqlen was truncated; a numpy table's error said "got int32".
    (lambda q: tt.flash_attn_varlen_func(q[0], q[0], q[0], torch.tensor([0, 4], dtype=torch.int32),
                                         torch.tensor([0, 4], dtype=torch.int32), 4.9, 4, arch="gfx942"),
     ValueError, "max_seqlen_q: expected an int, got 4.9"),
    (lambda q: tt.flash_attn_with_kvcache(q, q, q, cache_seqlens=np.array([1], np.int32), arch="gfx942"),
     ValueError, "cache_seqlens: expected an int32 tensor, got ndarray"),
    (lambda q: tt.flash_attn_func(q, q, q, alibi_slopes=torch.ones(2, device="meta"), arch="gfx942"), ValueError,
     "alibi_slopes: on meta"),
    (lambda q: tt.flash_attn_func(q, q, q, window_size=(2**31, 0), arch="gfx942"), ValueError, "window_size: "),
    (lambda q: tt.flash_attn_func(q, q, q, softcap=1e6, arch="gfx942"), ValueError, "softcap: expected at most"),
    (lambda q: tt.flash_attn_with_kvcache(q, q, q, cache_seqlens=4, return_softmax_lse="no", arch="gfx942"),
     ValueError, "return_softmax_lse: expected a bool"),
    # Session 47's audit: meta index and rotary tensors gave torch's own error, naming nothing.
    (lambda q: tt.flash_attn_with_kvcache(q, q, q, cache_seqlens=torch.ones(1, dtype=torch.int32, device="meta"),
                                          arch="gfx942"), ValueError, "cache_seqlens: on meta"),
    (lambda q: tt.flash_attn_with_kvcache(q, q, q, cache_seqlens=4, rotary_cos=torch.ones(8, 8, device="meta"),
                                          rotary_sin=torch.ones(8, 8), arch="gfx942"),
     ValueError, "rotary_cos: on meta"),
    (lambda q: torch.jit.trace(lambda x: tt.flash_attn_func(x, x, x, arch="gfx942"), (q,)), RuntimeError,
     "cannot be traced with torch.jit.trace"),
])
def test_unsupported_and_bad_arguments_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call(randn(1, 4, 2, 32))


def test_numpy_and_0d_scalars_are_taken_as_flash_attention_takes_them():
    """np.float32 / 0-d tensor soft-caps and dropout rates, numpy int windows and numpy bools give
    the same results as Python's numbers."""
    q, k, v = randn(1, 12, 2, 32), randn(1, 12, 2, 32), randn(1, 12, 2, 32)
    want = tt.flash_attn_func(q, k, v, softcap=5.0, window_size=(4, 0), causal=True, arch="gfx942")
    got = tt.flash_attn_func(q, k, v, softcap=torch.tensor(5.0), window_size=(np.int64(4), np.int64(0)),
                             causal=np.bool_(True), deterministic=np.bool_(False), arch="gfx942")
    assert torch.equal(got, want)
    torch.manual_seed(3)
    want = tt.flash_attn_func(q, k, v, dropout_p=0.25, arch="gfx942")
    torch.manual_seed(3)
    assert torch.equal(tt.flash_attn_func(q, k, v, dropout_p=np.float32(0.25), arch="gfx942"), want)


# -- the ROCm path, against the HIP stand-in ---------------------------------------------------

class StandInTorchDevice(tt.TorchHipDevice):
    """TorchHipDevice with its two torch.cuda hooks replaced: memory comes from the HIP stand-in
    (host memory, so a CPU tensor can alias it) instead of torch.empty on a ROCm GPU, and the
    stream is a stand-in stream instead of torch's current one. Everything else is the real class."""

    def __init__(self, hip):
        super().__init__(hip, torch.device("cpu"))
        self.stream = hip.create_stream()
        self.hip_buffers = []
        self.requests = []

    def _new_bytes(self, size):
        self.requests.append(size)
        buf = self.hip.alloc(size, "torch")
        self.hip_buffers.append(buf)
        return torch.frombuffer((ctypes.c_uint8 * size).from_address(buf.addr), dtype=torch.uint8)

    def stream_handle(self):
        return int(self.stream.handle)

    def tensor(self, x):
        """A copy of x in stand-in memory (what a ROCm tensor would be)."""
        raw = self._new_bytes(max(x.numel() * x.element_size(), 16))
        t = raw.view(x.dtype)[:x.numel()].view(x.shape)
        t.copy_(x)
        return t

    def owns(self, t):
        """Is t in stand-in memory (a "ROCm tensor")?"""
        return any(b.addr <= t.data_ptr() < b.addr + b.size for b in self.hip_buffers)

    def release(self):
        self.hip.destroy_stream(self.stream)
        for buf in self.hip_buffers:
            self.hip.free(buf)


@pytest.fixture
def stand_in(hip_backend, monkeypatch):
    hip_backend.needs_stub()
    dev = StandInTorchDevice(hip_backend.device("gfx942"))
    monkeypatch.setattr(tt, "_is_rocm", dev.owns)
    monkeypatch.setattr(tt, "_rocm_device", lambda d: dev)
    yield dev, hip_backend.stub
    dev.release()


@pytest.mark.hip
def test_rocm_path_on_the_hip_stand_in(stand_in, monkeypatch):
    """Tensors in device memory are passed by data_ptr (no copies), outputs and the backward's
    workspace come from the torch-side allocator, every launch goes to the stream of
    stream_handle(): results bitwise equal to the emulator's."""
    dev, stub = stand_in
    torch.manual_seed(8)
    host = [randn(1, 29, 4, 64), randn(1, 41, 2, 64), randn(1, 41, 2, 64)]
    do = randn(1, 29, 4, 64)
    q, k, v = (dev.tensor(x).requires_grad_() for x in host)
    a = tt.tensor_array(dev, q.detach(), "q")
    assert a.address == q.data_ptr() and a.strides == q.stride() and a.device is dev
    launches, streams = stub.count("launches"), []
    hip_launch = dev.hip.launch

    def launch(*args, stream=None, **kwargs):
        streams.append(stream.handle)
        return hip_launch(*args, stream=stream, **kwargs)

    monkeypatch.setattr(dev.hip, "launch", launch)
    out = tt.flash_attn_func(q, k, v, causal=True, deterministic=True)
    out.backward(dev.tensor(do))
    assert stub.count("launches") - launches == len(streams) >= 4  # forward, dot_do_o, dq_dk_dv, convert_dq
    assert set(streams) == {dev.stream_handle()}
    assert all(dev.owns(t) for t in (out, q.grad, k.grad, v.grad))  # outputs from the allocator's memory
    from tiledsl.ops import fmha_bwd_plan

    lse = np.zeros((1, 4, 29), np.float32)
    size = fmha_bwd_plan(*(tt._host_view(x) for x in (do, *host)), tt._host_view(out.detach()), lse, causal=True,
                         deterministic=True, arch="gfx942").workspace_size
    assert max(-(-size // 16) * 16, 16) in dev.requests
    # the same call on the emulator, from CPU tensors
    hq, hk, hv = (x.clone().requires_grad_() for x in host)
    ref = tt.flash_attn_func(hq, hk, hv, causal=True, deterministic=True, arch="gfx942")
    ref.backward(do)
    for got, want in ((out, ref), (q.grad, hq.grad), (k.grad, hk.grad), (v.grad, hv.grad)):
        assert torch.equal(got.detach(), want.detach())


@pytest.mark.hip
def test_rocm_kvcache_appends_into_device_memory(stand_in, monkeypatch):
    dev, _stub = stand_in
    torch.manual_seed(9)
    kc, vc = randn(6, 16, 1, 32), randn(6, 16, 1, 32)
    q, k, v = randn(1, 1, 2, 32), randn(1, 1, 1, 32), randn(1, 1, 1, 32)
    table = torch.tensor([[4, 1, 3]], dtype=torch.int32)
    seqlens = torch.tensor([40], dtype=torch.int32)
    dkc, dvc = dev.tensor(kc), dev.tensor(vc)
    wrapped, tensor_array = [], tt.tensor_array
    monkeypatch.setattr(tt, "tensor_array", lambda d, t, name: wrapped.append(name) or tensor_array(d, t, name))
    got = tt.flash_attn_with_kvcache(dev.tensor(q), dkc, dvc, dev.tensor(k), dev.tensor(v),
                                     cache_seqlens=dev.tensor(seqlens), block_table=dev.tensor(table), causal=True)
    want = tt.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, block_table=table, causal=True,
                                      arch="gfx942")
    assert torch.equal(got, want) and torch.equal(dkc, kc) and torch.equal(dvc, vc)
    assert torch.equal(kc[3, 8], k[0, 0])  # key 40 = page 3 (the table's third), slot 8
    assert wrapped == ["q", "k_cache", "v_cache", "k", "v", "cache_seqlens", "block_table"]  # all in place


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_dropout_forward_backward(arch):
    """dropout_p with the seed drawn from torch's generator (reproduced by torch.manual_seed):
    the output and the gradients against the float64 model with the same keep bits."""
    from tiledsl.reference import fmha_bwd_reference, fmha_fwd_reference

    torch.manual_seed(6)
    q, k, v = randn(2, 21, 4, 64, grad=True), randn(2, 30, 2, 64, grad=True), randn(2, 30, 2, 64, grad=True)
    torch.manual_seed(11)
    seed = int(torch.randint(0, 2**62, (1,)).item())  # what flash_attn_func draws after the same reseed
    torch.manual_seed(11)
    out = tt.flash_attn_func(q, k, v, dropout_p=0.2, causal=True, arch=arch)
    do = torch.randn_like(out)
    out.backward(do)
    args = [x.detach().double().numpy() for x in (q, k, v)]
    kw = dict(causal=True, dropout_p=0.2, seed=seed)
    assert_close(out, torch.from_numpy(fmha_fwd_reference(*args, **kw)), F16, "out")
    grads = fmha_bwd_reference(do.double().numpy(), *args, **kw)
    for got, want, name in zip((q.grad, k.grad, v.grad), grads, ("dq", "dk", "dv"), strict=True):
        assert_close(got, torch.from_numpy(want), F16, name)


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_alibi_forward_backward(arch):
    """alibi_slopes ([B, Hq] here) against the float64 model, through autograd."""
    torch.manual_seed(5)
    q, k, v = randn(2, 19, 4, 64, grad=True), randn(2, 23, 2, 64, grad=True), randn(2, 23, 2, 64, grad=True)
    slopes = torch.rand(2, 4) * 0.5
    out = tt.flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes, arch=arch)
    do = torch.randn_like(out)
    out.backward(do)
    ref, grads = reference(q, k, v, do, causal=True, alibi=slopes)
    assert_close(out, ref, F16, "out")
    for got, want, name in zip((q.grad, k.grad, v.grad), grads, ("dq", "dk", "dv"), strict=True):
        assert_close(got, want, F16, name)


def test_torch_compile_runs_the_functions_eagerly():
    """Under torch.compile the functions are a graph break (torch.compiler.disable): dynamo failed
    inside them on the numpy bytes of a launch (found by an adversarial sweep, session 45)."""
    q, k, v = (randn(1, 16, 2, 64).requires_grad_() for _ in range(3))

    def f(q, k, v):
        return tt.flash_attn_func(q, k, v, arch="gfx942").float().sum()

    out = torch.compile(f)(q, k, v)
    out.backward()
    assert torch.allclose(out, f(q, k, v)) and q.grad is not None and bool(q.grad.abs().sum() > 0)
