"""Runtime devices: one `Device` interface, an emulator and a HIP implementation."""

from typing import Any

from tiledsl.backends.rocm.runtime.device import (
    DEVICE_FORMS,
    Buffer,
    Device,
    Kernel,
    Module,
    Stream,
    default_device,
    device_from,
)

__all__ = ["DEVICE_FORMS", "Buffer", "Device", "EmulatorDevice", "HipDevice", "Kernel", "Module", "Stream",
           "default_device", "device_from"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the emulator pulls in its decoder tables, HIP needs hip-python.
    if name == "EmulatorDevice":
        from tiledsl.backends.rocm.runtime.emulator_device import EmulatorDevice

        return EmulatorDevice
    if name == "HipDevice":
        from tiledsl.backends.rocm.runtime.hip_device import HipDevice

        return HipDevice
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
