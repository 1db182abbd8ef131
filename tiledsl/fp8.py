"""The 8-bit float dtypes and what they are on each arch.

`f8e4m3` and `f8e5m2` name a layout (sign, 4 or 5 exponent bits, 3 or 2 mantissa bits); the
arch's fp8 *flavour* (arch table `fp8_flavour`) fixes the rest -- the exponent bias, NaN and
infinity codes -- and with it the MLIR element type of the kernel's IR and the numpy
(ml_dtypes) type the launcher accepts:

| dtype  | flavour | archs           | MLIR type   | numpy (ml_dtypes) | max    | inf | NaN        |
|--------|---------|-----------------|-------------|-------------------|--------|-----|------------|
| f8e4m3 | fnuz    | gfx942          | f8E4M3FNUZ  | float8_e4m3fnuz   | 240    | no  | 0x80       |
| f8e5m2 | fnuz    | gfx942          | f8E5M2FNUZ  | float8_e5m2fnuz   | 57344  | no  | 0x80       |
| f8e4m3 | ocp     | gfx950, gfx1201 | f8E4M3FN    | float8_e4m3fn     | 448    | no  | 0x7F, 0xFF |
| f8e5m2 | ocp     | gfx950, gfx1201 | f8E5M2      | float8_e5m2       | 57344  | yes | 0x7D-0x7F, 0xFD-0xFF |

gfx90a and gfx1100 have no 8-bit float instructions: the checker refuses f8 values there.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiledsl.backends.rocm.arch import ARCHS, Arch
from tiledsl.errors import TileError

F8_DTYPES = ("f8e4m3", "f8e5m2")


@dataclass(frozen=True)
class Fp8Format:
    mlir: str  # the MLIR element type's name, as ir.Type.parse reads it
    numpy: str  # the ml_dtypes type's name
    max: float  # largest finite value
    has_inf: bool


FORMATS: dict[tuple[str, str], Fp8Format] = {
    ("f8e4m3", "fnuz"): Fp8Format("f8E4M3FNUZ", "float8_e4m3fnuz", 240.0, False),
    ("f8e5m2", "fnuz"): Fp8Format("f8E5M2FNUZ", "float8_e5m2fnuz", 57344.0, False),
    ("f8e4m3", "ocp"): Fp8Format("f8E4M3FN", "float8_e4m3fn", 448.0, False),
    ("f8e5m2", "ocp"): Fp8Format("f8E5M2", "float8_e5m2", 57344.0, True),
}
MLIR_NAMES = {f.mlir: dtype for (dtype, _), f in FORMATS.items()}  # MLIR type name -> dtype


def fp8_archs() -> list[str]:
    """The archs with an 8-bit float format, for messages."""
    return [a.name for a in ARCHS.values() if a.fp8_flavour]


def fp8_format(dtype: str, flavour: str | None) -> Fp8Format:
    """The format of `dtype` in `flavour` (an arch's fp8_flavour); an error when there is none."""
    if flavour is None:
        raise TileError(f"{dtype} has no meaning without an arch with 8-bit floats ({', '.join(fp8_archs())})")
    return FORMATS[dtype, flavour]


def describe(dtype: str, arch: Arch) -> str:
    """'f8e4m3 on gfx942 is FNUZ (ml_dtypes.float8_e4m3fnuz)', for messages."""
    fmt = fp8_format(dtype, arch.fp8_flavour)
    return f"{dtype} on {arch.name} is {arch.fp8_flavour.upper()} (ml_dtypes.{fmt.numpy})"  # type: ignore[union-attr]
