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
    # SGPR spill moves (v_writelane/v_readlane) inside a loop of the control flow (natural_loops):
    # spills outside every loop cost a few instructions per workgroup, these per step.
    spill_moves_in_loops: int = 0
    # Those inside an innermost loop (one holding no other): the hot loop of a kernel whose outer
    # loop runs a few times (the forward's paired query blocks run its key loop twice).
    spill_moves_in_inner_loops: int = 0
    # Conditional branches inside an innermost loop (a masked access compiled as a branch is one).
    branches_in_inner_loops: int = 0


def count_instructions(asm: str, symbol: str | None = None) -> InstructionCounts:
    """Count the machine instructions in the body of `symbol` (or of every function) in `asm`."""
    functions: set[str] = set()
    counts = InstructionCounts()
    inside = False
    labels: dict[str, int] = {}  # label -> index of the instruction after it
    code: list[tuple[str, str | None]] = []  # per instruction: its mnemonic, the label it branches to
    entries: list[int] = []  # the first instruction of each function counted
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
                if inside:
                    entries.append(counts.total)
            elif label.startswith(".Lfunc_end"):
                inside = False
            labels[label] = counts.total
            continue
        # Directives (".amdhsa_*", ".p2align" ...) start with a dot; instructions with a letter.
        if not inside or not line[0].isalpha():
            continue
        mnemonic, *operands = line.split(None, 1)
        code.append((mnemonic, operands[0].strip() if mnemonic.startswith(("s_branch", "s_cbranch")) and operands
                     else None))
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
    loops = natural_loops(code, labels, entries)
    in_any = set().union(*loops.values()) if loops else set()
    inner = set().union(*(body for head, body in loops.items()
                          if not any(h != head and h in body for h in loops)))
    counts.spill_moves_in_loops = sum(i in in_any for i in spill_moves)
    counts.spill_moves_in_inner_loops = sum(i in inner for i in spill_moves)
    counts.branches_in_inner_loops = sum(code[i][0].startswith("s_cbranch") for i in inner)
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


def natural_loops(code: list[tuple[str, str | None]], labels: dict[str, int],
                  entries: list[int]) -> dict[int, set[int]]:
    """The loops of a function's control flow: per loop header (its first instruction), the
    instructions of its body. An edge closes a loop where its target dominates it (every path from
    the entry passes the target), wherever the blocks lie: LLVM's block placement branches back to
    blocks that merely come first (an if-else whose branches swapped places), and rotates loops so
    that a fall-through closes them."""
    if not code:
        return {}
    leaders = sorted({0, *entries, *(i for i in labels.values() if i < len(code)),
                      *(i + 1 for i, (_, t) in enumerate(code) if t is not None and i + 1 < len(code))})
    ends = leaders[1:] + [len(code)]
    block_of = {start: n for n, start in enumerate(leaders)}
    succ: list[list[int]] = []
    for n, end in enumerate(ends):
        mnemonic, target = code[end - 1]
        out = []
        if target in labels and labels[target] in block_of:
            out.append(block_of[labels[target]])
        if mnemonic not in ("s_branch", "s_endpgm", "s_setpc_b64") and end < len(code) and end not in entries:
            out.append(n + 1)
        succ.append(out)
    # Dominators by the iterative data-flow equations (blocks number in the tens).
    every = set(range(len(leaders)))
    roots = {block_of[e] for e in entries if e in block_of} or {0}
    dom = [({n} if n in roots else set(every)) for n in range(len(leaders))]
    preds: list[list[int]] = [[] for _ in leaders]
    for n, out in enumerate(succ):
        for m in out:
            preds[m].append(n)
    reachable, todo = set(roots), list(roots)
    while todo:
        for m in succ[todo.pop()]:
            if m not in reachable:
                reachable.add(m)
                todo.append(m)
    changed = True
    while changed:
        changed = False
        for n in range(len(leaders)):
            if n in roots:
                continue
            new = {n} | (set.intersection(*(dom[p] for p in preds[n])) if preds[n] else set())
            if new != dom[n]:
                dom[n], changed = new, True
    loops: dict[int, set[int]] = {}
    for n in sorted(reachable):
        for head in succ[n]:
            if head in dom[n]:  # a back edge: the body is what reaches n without passing head
                body, todo = {head, n}, [n] if n != head else []
                while todo:
                    for p in preds[todo.pop()]:
                        if p not in body and p in reachable:
                            body.add(p)
                            todo.append(p)
                loops.setdefault(head, set()).update(body)
    return {leaders[h]: {i for b in body for i in range(leaders[b], ends[b])} for h, body in loops.items()}
