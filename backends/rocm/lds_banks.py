"""LDS bank conflicts: the cycles one LDS access takes, from its lanes' byte addresses.

One function for the timing model (emulator/trace.py prices every LDS instruction it traces) and
for the compiler (assign-layouts prices the stores a layout would make), so both agree.
"""

from __future__ import annotations

import numpy as np


def lds_cycles(addrs: np.ndarray, nbytes: int, banks: int) -> int:
    """Cycles the LDS needs for one access: lanes go in groups that move banks x 4 bytes, and a
    group takes as many cycles as the most distinct dwords any one bank holds (lanes reading the
    same dword share it: a broadcast)."""
    if addrs.size == 0:
        return 0
    dwords = max(nbytes // 4, 1)
    per_group = max(banks // dwords, 1)
    words = (addrs.astype(np.int64) // 4)[:, None] + np.arange(dwords)
    group = (np.arange(addrs.size) // per_group)[:, None] + np.zeros(dwords, dtype=np.int64)
    keys = np.unique(group.ravel() * (1 << 40) + words.ravel())
    g, w = keys >> 40, keys & ((1 << 40) - 1)
    per_bank = np.bincount(g * banks + (w % banks), minlength=(int(g[-1]) + 1) * banks)
    return int(per_bank.reshape(-1, banks).max(axis=1).sum())
