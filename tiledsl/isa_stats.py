"""Static figures of a compiled kernel: instruction mix from its `.s`, resources from its manifest.

Used by `tiledsl inspect` and the benchmarks, where figures of our kernels sit next to Triton's.
Counts are static (each instruction once, loops not unrolled by execution).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from tiledsl.backends.rocm.arch import get_arch

_TYPE_FUNC = re.compile(r"^\s*\.type\s+([^,\s]+)\s*,\s*@function")
_MATRIX_PREFIXES = {"mfma": ("v_mfma", "v_smfmac"), "wmma": ("v_wmma", "v_swmmac")}
# Coarse instruction classes, first match wins; "matrix" is checked before "valu".
_CLASSES = (("matrix", ("v_mfma", "v_smfmac", "v_wmma", "v_swmmac")), ("lds", ("ds_",)),
            ("global", ("global_", "buffer_", "flat_")), ("scratch", ("scratch_",)),
            ("salu", ("s_",)), ("valu", ("v_",)))
# How LLVM spills SGPRs: into lanes of a VGPR it reserves (our lowering emits neither otherwise).
_SGPR_SPILL_MOVES = ("v_writelane_b32", "v_readlane_b32")


@dataclass
class InstructionCounts:
    total: int = 0
    mfma: int = 0
    wmma: int = 0
    barriers: int = 0
    classes: dict[str, int] = field(default_factory=dict)
    mnemonics: Counter = field(default_factory=Counter)
    # SGPR spill moves (v_writelane/v_readlane) inside a loop, i.e. between a label and a branch
    # back to it: spills outside every loop cost a few instructions per workgroup, these per step.
    spill_moves_in_loops: int = 0


def count_instructions(asm: str, symbol: str | None = None) -> InstructionCounts:
    """Count the machine instructions in the body of `symbol` (or of every function) in `asm`."""
    functions: set[str] = set()
    counts = InstructionCounts()
    inside = False
    labels: dict[str, int] = {}  # label -> index of the instruction after it
    loops: list[tuple[int, int]] = []  # [first, last] instruction indices of each loop body
    spill_moves: list[int] = []
    for raw in asm.splitlines():
        m = _TYPE_FUNC.match(raw)
        if m:
            functions.add(m.group(1))
            continue
        line = raw.split(";", 1)[0].strip()
        if not line:
            continue
        if line.endswith(":"):
            label = line[:-1]
            if label in functions:
                inside = symbol is None or label == symbol
            elif label.startswith(".Lfunc_end"):
                inside = False
            labels[label] = counts.total
            continue
        # Directives (".amdhsa_*", ".p2align" ...) start with a dot; instructions with a letter.
        if not inside or not line[0].isalpha():
            continue
        mnemonic, *operands = line.split(None, 1)
        if mnemonic.startswith(("s_branch", "s_cbranch")) and operands and operands[0] in labels:
            loops.append((labels[operands[0]], counts.total))  # a branch back: a loop
        if mnemonic in _SGPR_SPILL_MOVES:
            spill_moves.append(counts.total)
        counts.total += 1
        counts.mnemonics[mnemonic] += 1
        if mnemonic.startswith(_MATRIX_PREFIXES["mfma"]):
            counts.mfma += 1
        elif mnemonic.startswith(_MATRIX_PREFIXES["wmma"]):
            counts.wmma += 1
        if mnemonic == "s_barrier" or mnemonic.startswith("s_barrier_"):
            counts.barriers += 1
        for cls, prefixes in _CLASSES:
            if mnemonic.startswith(prefixes):
                counts.classes[cls] = counts.classes.get(cls, 0) + 1
                break
        else:
            counts.classes["other"] = counts.classes.get("other", 0) + 1
    counts.spill_moves_in_loops = sum(any(a <= i <= b for a, b in loops) for i in spill_moves)
    return counts


@dataclass
class IsaStats:
    kernel: str
    arch: str
    instructions: int
    mfma: int
    wmma: int
    barriers: int
    vgprs: int
    agprs: int
    sgprs: int
    lds_bytes: int
    vgpr_spills: int
    sgpr_spills: int
    scratch_bytes: int
    occupancy: int  # waves per SIMD
    classes: dict[str, int]
    sgpr_spill_moves_in_loops: int = 0  # see InstructionCounts.spill_moves_in_loops

    @property
    def matrix_ops(self) -> int:
        return self.mfma + self.wmma

    @property
    def spills(self) -> int:
        return self.vgpr_spills + self.sgpr_spills

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["matrix_ops"] = self.matrix_ops
        return data


def isa_stats(asm: str, manifest: dict[str, Any]) -> IsaStats:
    """Instruction counts of the manifest's kernel in `asm`, with its resources and occupancy."""
    arch = get_arch(manifest["arch"])
    counts = count_instructions(asm, manifest.get("symbol"))
    vgprs = int(manifest.get("vgpr_count") or 0)
    agprs = int(manifest.get("agpr_count") or 0)
    lds = int(manifest.get("lds_bytes") or 0)
    wg = manifest.get("workgroup_size") or [arch.wave_size, 1, 1]
    waves = max(1, wg[0] * wg[1] * wg[2] // arch.wave_size)
    return IsaStats(
        kernel=manifest["kernel"], arch=arch.name, instructions=counts.total, mfma=counts.mfma,
        wmma=counts.wmma, barriers=counts.barriers, vgprs=vgprs, agprs=agprs,
        sgprs=int(manifest.get("sgpr_count") or 0), lds_bytes=lds,
        vgpr_spills=int(manifest.get("vgpr_spill_count") or 0),
        sgpr_spills=int(manifest.get("sgpr_spill_count") or 0),
        scratch_bytes=int(manifest.get("private_segment_size") or 0),
        occupancy=arch.occupancy(vgprs, lds, waves), classes=counts.classes,
        sgpr_spill_moves_in_loops=counts.spill_moves_in_loops)
