"""Test session set-up: where no AMD GPU is visible, hip-python is pointed at the HIP stand-in
(tests/_hipstub.py) before any test can load the HIP runtime, so the HIP tier runs everywhere."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tiledsl.backends.rocm.arch import ARCH_NAMES


def _real_gpu() -> bool:
    """A real AMD GPU and ROCm's own runtime (the stand-in is not set up yet when this runs)."""
    from tiledsl.backends.rocm.runtime.device import gpu_visible

    return "TILEDSL_HIPSTUB_DIR" not in os.environ and gpu_visible()


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("TILEDSL_HIPSTUB_DIR") or os.path.exists("/dev/kfd"):
        return  # set up already (by the xdist controller), or a machine that may have a real GPU
    from _hipstub import build

    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    where = Path(cache.mkdir("hipstub")) if cache else Path(tempfile.gettempdir()) / "tiledsl-hipstub"
    root = build(where)
    os.environ["TILEDSL_HIPSTUB_DIR"] = str(root)  # xdist workers inherit both
    os.environ["ROCM_PATH"] = str(root)  # hip-python finds $ROCM_PATH/lib/libamdhip64.so first


class HipBackend:
    """What the HIP tests run against: the stand-in (`stub` set) or a real GPU (`stub` None)."""

    def __init__(self) -> None:
        self.stub = None
        if not _real_gpu():
            from _hipstub import HipStub

            root = os.environ.get("TILEDSL_HIPSTUB_DIR")
            if not root:
                pytest.skip("/dev/kfd exists but no AMD GPU answers through HIP, and the stand-in is off")
            self.stub = HipStub(Path(root) / "lib" / "libamdhip64.so", list(ARCH_NAMES))

    def device(self, arch: str):
        """The HipDevice of `arch`, or a skip naming why there is none."""
        from tiledsl.backends.rocm.runtime.hip_device import HipDevice, device_count

        if self.stub is not None:
            return HipDevice(self.stub.ordinal(arch))
        for ordinal in range(device_count()):
            dev = HipDevice(ordinal)
            if dev.arch.name == arch:
                return dev
        pytest.skip(f"no {arch} GPU visible to the real HIP runtime on this machine")

    def needs_stub(self) -> None:
        if self.stub is None:
            pytest.skip("reads the HIP stand-in's counters; this run uses a real GPU")


@pytest.fixture(scope="session")
def hip_backend() -> HipBackend:
    pytest.importorskip("hip", reason="hip-python is not installed (pip install '.[hip]')")
    return HipBackend()
