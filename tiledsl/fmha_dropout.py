"""Dropout arguments of the attention ops (docs/dropout.md): checked once, turned into the kernels'
scalars. The random bits are `tiledsl.reference.dropout_keep_mask`: a pure function of (seed,
offset, sequence, head, row, key) that the forward and the backward both regenerate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tiledsl.device_array import DeviceArray
from tiledsl.plan import Ref
from tiledsl.reference import DROPOUT_LEVELS, dropout_keep_scale, dropout_threshold

SEED_LIMIT = 2**64
OFFSET_LIMIT = 2**31


@dataclass(frozen=True)
class DropoutCall:
    """A checked dropout request: p = 0 means none (the variant without dropout)."""

    p: float = 0.0
    seed: int = 0
    offset: int = 0
    return_mask: bool = False

    @property
    def on(self) -> bool:
        return self.p > 0.0

    def env(self) -> dict[str, Any]:
        """The kernels' dropout scalars (fmha_fwd.tile, fmha_bwd_dq_dk_dv.tile)."""
        def i32(x: int) -> int:
            return x - 2**32 if x >= 2**31 else x

        return {"seed_lo": i32(self.seed & 0xFFFFFFFF), "seed_hi": i32(self.seed >> 32), "rng_offset": self.offset,
                "drop_threshold": dropout_threshold(self.p),
                "drop_scale": float(np.float32(dropout_keep_scale(self.p)))}


NO_DROPOUT = DropoutCall()
# The kernels' dropout scalars and their values in a variant without dropout.
DROPOUT_ARGS = (("seed_lo", 0), ("seed_hi", 0), ("rng_offset", 0), ("drop_threshold", 0), ("drop_scale", 1.0))


def dropout_scalars(dropout: bool) -> tuple[tuple[str, object], ...]:
    """A plan stage's dropout arguments: the call's (Ref) when its variant drops, else fixed."""
    return tuple((name, Ref(name) if dropout else fixed) for name, fixed in DROPOUT_ARGS)


def check_dropout(dropout_p: Any, seed: Any, offset: Any, return_dropout_mask: Any = False) -> DropoutCall:
    """Each bad argument a ValueError naming it."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, int | float | np.floating | np.integer):
        raise ValueError(f"dropout_p: expected a float in [0, 1), got {dropout_p!r}")
    p = float(dropout_p)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout_p: expected a float in [0, 1), got {dropout_p!r}")
    if 0.0 < p < 1.0 / DROPOUT_LEVELS:
        raise ValueError(f"dropout_p: {dropout_p!r} is below 1/{DROPOUT_LEVELS}, the step of the keep test (one random "
                         "byte per element, as flash-attention and CK): nothing would be dropped; pass 0 for none")
    for name, x, limit in (("seed", seed, SEED_LIMIT), ("offset", offset, OFFSET_LIMIT)):
        if isinstance(x, bool) or not isinstance(x, int | np.integer) or not 0 <= int(x) < limit:
            raise ValueError(f"{name}: expected an int in [0, 2**{limit.bit_length() - 1}), got {x!r}")
    if not isinstance(return_dropout_mask, bool | np.bool_):
        raise ValueError(f"return_dropout_mask: expected a bool, got {return_dropout_mask!r}")
    return_dropout_mask = bool(return_dropout_mask)
    if return_dropout_mask and p == 0.0:
        raise ValueError("return_dropout_mask: needs dropout_p > 0 (without dropout every element is kept)")
    return DropoutCall(p, int(seed), int(offset), return_dropout_mask)


def dropout_mask_output(shape: tuple[int, ...], varlen: bool, device: Any, on_device: bool) -> tuple[Any, Any]:
    """The keep-mask output, zeros, and the kernel's 4-D view of it: batch mode [B, Hq, Sq, Sk];
    group mode [Hq, total_q, max_seqlen_k] (the kernel's [1, Hq, total_q, max_seqlen_k])."""
    if on_device:
        mask = DeviceArray.from_numpy(device, np.zeros(shape, np.bool_), "dropout_mask")
        return mask, (mask.expand() if varlen else mask)
    mask = np.zeros(shape, np.bool_)
    return mask, (mask[None] if varlen else mask)
