"""The kernel-argument ABI shared by the MLIR emitter, the manifest and the launcher.

Order: each declared argument in turn — a tensor gives its base pointer (8 bytes, global address
space) followed by one i32 stride per dim (in elements); a scalar gives its value (4 bytes) — then
one i32 per run-time shape symbol in first-appearance order. Every field is naturally aligned,
which is also how LLVM lays out the kernarg segment (the manifest test checks the two agree).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tiledsl.lang.ast import BoundKernel, ScalarType, TensorType


@dataclass(frozen=True)
class KernArg:
    name: str  # "q", "q.stride0", "alpha", "M"
    kind: str  # "pointer", "stride", "scalar", "shape"
    dtype: str  # element dtype for pointers, value dtype otherwise
    offset: int
    size: int
    tensor: str | None = None  # owning tensor for pointers and strides
    dim: int | None = None  # for strides

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def kernarg_layout(bound: BoundKernel, unit_last_stride: bool = True) -> list[KernArg]:
    """With unit_last_stride, each tensor's last-dim stride is the constant 1 and not passed."""
    fields: list[KernArg] = []
    offset = 0

    def add(name: str, kind: str, dtype: str, size: int, **extra: object) -> None:
        nonlocal offset
        offset = (offset + size - 1) // size * size
        fields.append(KernArg(name, kind, dtype, offset, size, **extra))  # type: ignore[arg-type]
        offset += size

    for arg in bound.kernel.args:
        if isinstance(arg.type, TensorType):
            add(arg.name, "pointer", arg.type.dtype, 8, tensor=arg.name)
            for d in range(len(arg.type.dims) - (1 if unit_last_stride else 0)):
                add(f"{arg.name}.stride{d}", "stride", "i32", 4, tensor=arg.name, dim=d)
        else:
            assert isinstance(arg.type, ScalarType)
            add(arg.name, "scalar", arg.type.dtype, 4)
    for sym in bound.shape_symbols:
        add(sym, "shape", "i32", 4)
    return fields


def kernarg_size(layout: list[KernArg]) -> int:
    """Bytes of the explicit arguments (LLVM reports the same, before any hidden arguments)."""
    return max((f.offset + f.size for f in layout), default=0)
