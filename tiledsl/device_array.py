"""Tensors that live in device memory, for callers that keep data on the GPU between launches.

A `DeviceArray` is a runtime `Buffer` plus a numpy-style view: shape, dtype and strides (in
elements) from an element offset. The launcher passes its address as it is -- no copies -- after
the same checks as for numpy arrays, plus one more: the view must lie inside its buffer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class DeviceArray:
    buffer: Any  # tiledsl.backends.rocm.runtime.Buffer
    shape: tuple[int, ...]
    dtype: np.dtype
    strides: tuple[int, ...]  # elements
    offset: int = 0  # elements from the start of the buffer

    def __post_init__(self) -> None:
        # Checked here, once, so that every user of a view (the launcher, numpy(), the ops) can
        # rely on plain ints and a numpy dtype.
        for attr in ("addr", "size", "device", "freed"):
            if not hasattr(self.buffer, attr):
                raise ValueError(f"DeviceArray: buffer: expected a device Buffer (from device.alloc), got "
                                 f"{type(self.buffer).__name__}")
        shape = _ints("shape", self.shape, 0)
        strides = _ints("strides", self.strides, 0)
        if len(strides) != len(shape):
            raise ValueError(f"DeviceArray: strides {strides} do not match shape {shape} ({len(shape)} dims)")
        offset = _ints("offset", (self.offset,), 0)[0]
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "strides", strides)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "dtype", _dtype(self.dtype))

    @property
    def device(self) -> Any:
        return self.buffer.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # Python ints: np.prod wraps past 2**63 (to 0, "empty")

    @property
    def address(self) -> int:
        return self.buffer.addr + self.offset * self.dtype.itemsize

    @staticmethod
    def empty(device: Any, shape: tuple[int, ...], dtype: Any, name: str = "array") -> DeviceArray:
        dt = _dtype(dtype)
        shape = _ints("shape", shape, 0)
        n = int(np.prod(shape, dtype=object))
        strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        return DeviceArray(device.alloc(max(n * dt.itemsize, 16), name), tuple(shape), dt, strides)

    @staticmethod
    def from_numpy(device: Any, array: np.ndarray, name: str = "array") -> DeviceArray:
        if not isinstance(array, np.ndarray):
            raise ValueError(f"DeviceArray.from_numpy: expected a numpy array, got {type(array).__name__}")
        out = DeviceArray.empty(device, array.shape, array.dtype, name)
        if array.size:
            device.copy_in(out.buffer, np.ascontiguousarray(array).tobytes())
        return out

    def free(self) -> None:
        """Release the buffer's device memory. Every view of that buffer is dead afterwards: the
        launcher refuses it, and freeing it again is an error."""
        self.device.free(self.buffer)

    @property
    def freed(self) -> bool:
        return bool(self.buffer.freed)

    def numpy(self) -> np.ndarray:
        """Copy the view back to a new (contiguous) numpy array."""
        if self.buffer.freed:
            raise ValueError(f"DeviceArray '{self.buffer.name}' was freed")
        if not self.size:
            return np.zeros(self.shape, self.dtype)
        last = sum((n - 1) * s for n, s in zip(self.shape, self.strides, strict=True))
        raw = self.device.copy_out(self.buffer, (last + 1) * self.dtype.itemsize, self.offset * self.dtype.itemsize)
        flat = np.frombuffer(raw, dtype=self.dtype)
        view = np.lib.stride_tricks.as_strided(flat, self.shape, [s * self.dtype.itemsize for s in self.strides])
        return view.copy()

    def transpose(self, *axes: int) -> DeviceArray:
        if sorted(a for a in axes if isinstance(a, int)) != list(range(self.ndim)):
            raise ValueError(f"DeviceArray.transpose: expected a permutation of 0..{self.ndim - 1}, got {axes}")
        return DeviceArray(self.buffer, tuple(self.shape[a] for a in axes), self.dtype,
                           tuple(self.strides[a] for a in axes), self.offset)

    def expand(self) -> DeviceArray:
        """A leading axis of size 1 (x[None])."""
        return DeviceArray(self.buffer, (1,) + self.shape, self.dtype, (0,) + self.strides, self.offset)

    def squeeze0(self) -> DeviceArray:
        """Drop a leading axis of size 1 (x[0])."""
        if not self.shape or self.shape[0] != 1:
            raise ValueError(f"DeviceArray.squeeze0: expected a leading axis of size 1, got shape {self.shape}")
        return DeviceArray(self.buffer, self.shape[1:], self.dtype, self.strides[1:], self.offset)


def _ints(what: str, values: Any, low: int) -> tuple[int, ...]:
    """A tuple of Python ints >= low (numpy integers accepted; floats and bools are not sizes)."""
    if not isinstance(values, tuple | list) or not all(
            isinstance(v, int | np.integer) and not isinstance(v, bool) and v >= low for v in values):
        raise ValueError(f"DeviceArray: {what}: expected a tuple of ints >= {low}, got {values!r}")
    return tuple(int(v) for v in values)


def _dtype(dtype: Any) -> np.dtype:
    """A numpy dtype of fixed-size numbers (object, string and structured dtypes have no device form)."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"DeviceArray: dtype: expected a numpy dtype, got {dtype!r}") from None
    if dt.kind not in "biufcV" or dt.hasobject or dt.fields is not None or dt.itemsize == 0:
        raise ValueError(f"DeviceArray: dtype: expected a numeric dtype, got {dt}")
    return dt
