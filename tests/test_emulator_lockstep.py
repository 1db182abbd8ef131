"""Lockstep emulation (backends/rocm/emulator/lockstep.py) against the ordinary one-wave-at-a-time
path: the same launches both ways give bit-identical outputs, the same statistics and the same
faults, on every arch; and the launches really ran in lockstep (no silent fallback)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pytest

from tiledsl import ops
from tiledsl.backends.rocm.arch import ARCH_NAMES
from tiledsl.backends.rocm.emulator.memory import MemoryFault
from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice
from tiledsl.device_array import DeviceArray
from tiledsl.driver import compile_source
from tiledsl.launcher import launch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
from cases import CASES  # noqa: E402

pytestmark = pytest.mark.emulator

SAME_STATS = ("wave_instructions", "workgroups", "max_workgroup_instructions", "global_load_bytes",
              "global_load_unique_bytes")


def both_ways(arch: str, run) -> tuple[object, object]:
    """`run(device)` on an ordinary and a lockstep device: both results, after checking the
    launches' statistics agree and the lockstep device ran every multi-wave launch in lockstep."""
    old, new = EmulatorDevice(arch, lockstep=False), EmulatorDevice(arch)
    a, b = run(old), run(new)
    assert len(old.launches) == len(new.launches)
    for lo, ln in zip(old.launches, new.launches, strict=True):
        assert lo["path"] == "ordinary"
        assert ln["path"] in ("lockstep", "ordinary"), ln["path"]  # "fallback: ..." would be a lockstep gap
        assert {s: lo[s] for s in SAME_STATS} == {s: ln[s] for s in SAME_STATS}, ln["kernel"]
    assert any(ln["path"] == "lockstep" for ln in new.launches)
    return a, b


def assert_bits_equal(a, b) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


@functools.cache
def example(name: str, arch: str):
    path = EXAMPLES / f"{name}.tile"
    return compile_source(path.read_text(), str(path), arch, {"DT": "f16"})


@pytest.mark.parametrize("arch", ARCH_NAMES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_examples_bit_identical(name: str, arch: str) -> None:
    def run(dev):
        args, kwargs, _ = CASES[name]("f16", np.random.default_rng(3))
        launch(example(name, arch), *args, device=dev, **kwargs)
        return [a for a in args if isinstance(a, np.ndarray)]

    for a, b in zip(*both_ways(arch, run), strict=True):
        assert_bits_equal(a, b)


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_attention_forward_bit_identical(arch: str) -> None:
    """Causal attention: workgroups loop over different numbers of key blocks, so groups split
    and merge; MFMA/WMMA, LDS, compares and selects run batched."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 256, 2, 64)).astype(np.float16) for _ in range(3))
    (oa, la), (ob, lb) = both_ways(arch, lambda dev: ops.fmha_fwd(q, k, v, causal=True, return_lse=True,
                                                                  device=dev))
    assert_bits_equal(oa, ob)
    assert_bits_equal(la, lb)


@pytest.mark.parametrize("arch,hdim", [("gfx942", 64), ("gfx1100", 128)])
def test_attention_backward_deterministic_bit_identical(arch: str, hdim: int) -> None:
    """The backward plan; on gfx1100 at hdim 128 its main kernel spills VGPRs to scratch, which
    lockstep keeps per wave in one chunk array."""
    rng = np.random.default_rng(1)
    q, k, v, do = (rng.standard_normal((1, 128, 2, hdim)).astype(np.float16) for _ in range(4))
    out, lse = ops.fmha_fwd(q, k, v, causal=True, return_lse=True, device=EmulatorDevice(arch))

    def run(dev):
        return ops.fmha_bwd(do, q, k, v, out, lse, causal=True, deterministic=True, device=dev)

    for a, b in zip(*both_ways(arch, run), strict=True):
        assert_bits_equal(a, b)


SHIFTED = """
kernel shifted[BLOCK: int = 64, WAVES: int = 1, SHIFT: int = 0](
    x: tensor[f32](N), out: tensor[f32](K)) grid(cdiv(K, BLOCK)) waves(WAVES) {
    let i = program_id(0) * BLOCK + arange(0, BLOCK);
    store(out[i], load(x[i + SHIFT], mask=i < K, other=0.0) * 2.0, mask=i < K);
}
"""


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_the_same_first_fault_and_memory(arch: str) -> None:
    """x[i + 5] overruns x from workgroup 2 on: lockstep meets a fault in some wave first, restores
    the heap and reruns the ordinary way, which reports the first fault in launch order and
    leaves `out` as far as the ordinary run got."""
    kern = compile_source(SHIFTED, "shifted.tile", arch, {"BLOCK": "128", "WAVES": "2", "SHIFT": "5"})
    msgs, outs = [], []
    for lockstep in (False, True):
        dev = EmulatorDevice(arch, lockstep=lockstep)
        x = DeviceArray.from_numpy(dev, np.arange(3 * 128, dtype=np.float32), "x")
        out = DeviceArray.from_numpy(dev, np.full(8 * 128, -1.0, np.float32), "out")
        with pytest.raises(MemoryFault) as info:
            launch(kern, x, out, device=dev)
        msgs.append(str(info.value))
        outs.append(out.numpy())
        assert dev.launches == []  # a faulting launch records nothing
    assert msgs[0] == msgs[1]
    assert "workgroup (2, 0, 0)" in msgs[0] and "past the end of x" in msgs[0], msgs[0]
    assert_bits_equal(outs[0], outs[1])
    assert (outs[0][:256] == 2 * np.arange(5, 261)).all()  # workgroups 0 and 1 ran before the fault


def test_shuffled_schedule_keeps_the_ordinary_path() -> None:
    """The shuffled schedule's orders are its point: it never runs in lockstep."""
    dev = EmulatorDevice("gfx942", schedule="shuffle", seed=3)
    args, kwargs, check = CASES["gemm"]("f16", np.random.default_rng(3))
    launch(example("gemm", "gfx942"), *args, device=dev, **kwargs)
    assert dev.launches[-1]["path"] == "ordinary"
    assert check() < 1e-2
