"""fp8 arguments of the attention forward (docs/fp8.md): q/k/v of e4m3 in the arch's flavour,
per-tensor descale factors, the output dtype. Checked once, turned into the kernel's scalars."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from tiledsl.backends.rocm.arch import get_arch
from tiledsl.fp8 import fp8_archs, fp8_format

FP8_NAMES = ("float8_e4m3fn", "float8_e4m3fnuz")  # the e4m3 numpy dtypes (ml_dtypes), one per flavour
OUT_DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "f16": "f16", "float16": "f16"}


def is_fp8(dtype: Any) -> bool:
    return np.dtype(dtype).name in FP8_NAMES


@dataclass(frozen=True)
class Fp8Call:
    """A checked fp8 forward: the descale factors and the output dtype."""

    q_descale: float
    k_descale: float
    v_descale: float
    out_dtype: str  # "bf16" or "f16"
    p_scale: float  # P's scale before it is rounded: the format's largest value

    def qk_scale(self, scale: float) -> float:
        return scale * self.q_descale * self.k_descale

    def env(self) -> dict[str, float]:
        return {"p_scale": self.p_scale, "o_scale": float(np.float32(self.v_descale / self.p_scale))}


def check_fp8_dtype(q_dtype: Any, arch: str) -> None:
    """q's fp8 dtype against the arch: one with fp8 matrix instructions, in its flavour."""
    a = get_arch(arch)
    got = np.dtype(q_dtype).name
    if not a.fp8_flavour:
        raise ValueError(f"q: {got} needs fp8 matrix instructions, which {arch} does not have "
                         f"(fp8 runs on {', '.join(fp8_archs())})")
    want = fp8_format("f8e4m3", a.fp8_flavour).numpy
    if got != want:
        raise ValueError(f"q: {arch} takes {want} (its {a.fp8_flavour.upper()} e4m3), got {got}")


def _is_float(dtype: np.dtype) -> bool:
    """numpy's and ml_dtypes' floats (bfloat16, the fp8s: not np.number to numpy)."""
    try:
        ml_dtypes.finfo(dtype)
    except ValueError:
        return False
    return True


def _descale(name: str, x: Any) -> float:
    if x is None:
        return 1.0
    arr = np.asarray(x) if isinstance(x, np.ndarray | float | int | np.floating | np.integer) else None
    numeric = arr is not None and (np.issubdtype(arr.dtype, np.number) or _is_float(arr.dtype))
    if not numeric or isinstance(x, bool) or arr.size != 1:
        raise ValueError(f"{name}: expected a positive float (or a one-element float32 array), got {x!r}")
    value = float(arr.reshape(()))
    with np.errstate(over="ignore"):  # past the f32 range: inf, refused below
        f32 = float(np.float32(value))
    if not math.isfinite(f32) or f32 <= 0.0:
        raise ValueError(f"{name}: expected a positive finite float32 value, got {value!r}")
    return f32


def check_fp8(q_dtype: Any, arch: str, q_descale: Any, k_descale: Any, v_descale: Any,
              out_dtype: Any) -> Fp8Call | None:
    """The fp8 call for fp8 q/k/v (None for f16/bf16, which take no descale nor out_dtype); each
    problem a ValueError naming the argument."""
    if not is_fp8(q_dtype):
        for name, x in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale),
                        ("out_dtype", out_dtype)):
            if x is not None:
                raise ValueError(f"{name}: only for fp8 q/k/v (float8_e4m3); q is {np.dtype(q_dtype).name}")
        return None
    check_fp8_dtype(q_dtype, arch)
    if out_dtype is None:
        out = "bf16"
    elif isinstance(out_dtype, str) and out_dtype in OUT_DTYPES:
        out = OUT_DTYPES[out_dtype]
    else:
        raise ValueError(f"out_dtype: expected 'bf16' or 'f16' (fp8 attention writes 16-bit floats), got {out_dtype!r}")
    return Fp8Call(_descale("q_descale", q_descale), _descale("k_descale", k_descale),
                   _descale("v_descale", v_descale), out, fp8_format("f8e4m3", get_arch(arch).fp8_flavour).max)
