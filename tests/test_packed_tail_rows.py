"""Group mode with packed rows past the last sequence (cu_seqlens[-1] below the tensors' rows): no
kernel writes those rows, so every output the library allocates reads 0 there on every path (host
arrays, DeviceArrays), whatever the fresh device memory held, and the references agree. The
device memory is made dirty on purpose: the emulator's allocations, like hipMalloc's on a GPU,
promise nothing about their contents."""

from __future__ import annotations

import numpy as np
import pytest
from _fmha_util import assert_grads_close, check_out_lse

from tiledsl import ops
from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.device_array import DeviceArray
from tiledsl.reference import fmha_bwd_reference, fmha_fwd_kvcache_reference, fmha_fwd_reference

pytestmark = pytest.mark.emulator
CU = np.array([0, 10, 30], np.int32)  # 40 packed rows: the last 10 belong to no sequence


@pytest.fixture
def dirty_allocations(monkeypatch):
    """New DeviceArrays full of 0x7b bytes (f16 6.2e4), as uninitialised memory may be."""
    empty = DeviceArray.empty

    def dirty(device, shape, dtype, name="array"):
        arr = empty(device, shape, dtype, name)
        device.fill(arr.buffer, 0x7B)
        return arr

    monkeypatch.setattr(DeviceArray, "empty", staticmethod(dirty))


def _packed(rng, rows=40, heads=2, d=64):
    return tuple(rng.standard_normal((rows, heads, d)).astype(np.float16) for _ in range(3))


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_fwd_and_bwd_tail_rows_read_zero(arch, dirty_allocations):
    rng = np.random.default_rng(4)
    q, k, v = _packed(rng)
    kw = dict(cu_seqlens_q=CU, cu_seqlens_k=CU, causal=True)
    want, want_lse = fmha_fwd_reference(q, k, v, return_lse=True, **kw)
    assert not want[30:].any()
    dev = EmulatorDevice(arch)
    out, lse = ops.fmha_fwd(q, k, v, return_lse=True, device=dev, **kw)
    check_out_lse(out, lse, want, want_lse, 2e-3)
    d_out = ops.fmha_fwd(*(DeviceArray.from_numpy(dev, x) for x in (q, k, v)), device=dev, **kw)
    np.testing.assert_array_equal(out[30:], 0)
    np.testing.assert_array_equal(d_out.numpy(), out)  # the same kernels: the host path's bits

    do = rng.standard_normal(out.shape).astype(np.float16)
    grads = ops.fmha_bwd(do, q, k, v, out, lse, device=dev, **kw)
    wants = fmha_bwd_reference(do, q, k, v, **kw)
    for name, got in zip(("dq", "dk", "dv"), grads, strict=True):
        np.testing.assert_array_equal(got[30:], 0, err_msg=name)
    assert_grads_close(grads, wants, np.float16, ("dq", "dk", "dv"))


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_kvcache_batch_prefill_tail_rows_read_zero(arch, dirty_allocations):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((40, 2, 64)).astype(np.float16)
    kc, vc = (rng.standard_normal((2, 64, 2, 64)).astype(np.float16) for _ in range(2))
    kw = dict(cache_seqlens=np.array([20, 7], np.int32), cu_seqlens_q=CU, causal=True, return_lse=True)
    want, want_lse = fmha_fwd_kvcache_reference(q, kc, vc, **kw)
    assert want.shape == (40, 2, 64) and not want[30:].any() and np.isneginf(want_lse[:, 30:]).all()
    dev = EmulatorDevice(arch)
    out, lse = ops.fmha_fwd_kvcache(q, kc, vc, device=dev, **kw)
    check_out_lse(out, lse, want, want_lse, 2e-3)
    d_out, _ = ops.fmha_fwd_kvcache(*(DeviceArray.from_numpy(dev, x) for x in (q, kc, vc)), device=dev, **kw)
    np.testing.assert_array_equal(out[30:], 0)
    np.testing.assert_array_equal(d_out.numpy(), out)  # the same kernels: the host path's bits
