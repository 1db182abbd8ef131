"""Runtime devices: one `Device` interface, an emulator and a HIP implementation."""

from tiledsl.backends.rocm.runtime.device import Buffer, Device, Kernel, Module, Stream, default_device

__all__ = ["Buffer", "Device", "Kernel", "Module", "Stream", "default_device"]
