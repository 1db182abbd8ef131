"""Developer tool: regenerate the opcode tables (``_ops_<arch>.py``) from LLVM's disassembler.

Not used at run time. It needs ``llvm-mc-22`` (Debian ``llvm-22``) and is run by hand when an arch
is added: ``python -m tiledsl.backends.rocm.emulator.gen_tables``. For every encoding family it
builds one instruction word per opcode value with distinct register numbers in each operand
field, lets LLVM's disassembler name it, and reads each operand's register count back from the
printed ranges (``v[10:13]`` -> 4 dwords in the field that holds register 10). The emulator's own
decoder then only needs (family, opcode) -> (mnemonic, operand widths): facts, not code.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

from tiledsl.backends.rocm.arch import ARCH_NAMES, ARCHS

MARK_A = 0xBF807777  # s_nop 0x7777: consumed as a literal or printed as a marker
MARK_B = 0xBF806666  # s_nop 0x6666: always printed, separates the instructions

# Field -> register number used in the templates; the value identifies the field in the text.
V = {"d": 40, "s0": 10, "s1": 20, "s2": 30}


# LLVM's decoder rejects some encodings whose unused register fields are not zero: try each
# combination of (used, zero) and keep the first one it accepts.
_FLAT_VARIANTS = ((40, 20), (40, 0), (0, 20), (0, 0))
_DS_VARIANTS = ((40, 30, 20), (40, 0, 20), (0, 30, 20), (0, 0, 20), (40, 0, 0), (0, 0, 0))


def _templates(gen: str):
    """Yield (family, op, words, field_of_register) for every opcode value of every family."""
    sop = {40: "d", 10: "s0", 20: "s1"}
    vreg = {40: "d", 10: "s0", 20: "s1", 30: "s2"}
    for op in range(128):
        yield "SOP2", op, [0x80000000 | op << 23 | 40 << 16 | 20 << 8 | 10], sop
        yield "SOPC", op, [0xBF000000 | op << 16 | 20 << 8 | 10], sop
        yield "SOPP", op, [0xBF800000 | op << 16 | 3], sop
        yield "SOPP", op, [0xBF800000 | op << 16], sop
    for op in range(32):
        yield "SOPK", op, [0xB0000000 | op << 23 | 40 << 16 | 0x10], sop
    for op in range(256):
        yield "SOP1", op, [0xBE800000 | 40 << 16 | op << 8 | 10], sop
        yield "VOP1", op, [0x7E000000 | 40 << 17 | op << 9 | 266], vreg
        yield "VOPC", op, [0x7C000000 | op << 17 | 20 << 9 | 266], vreg
    for op in range(64):
        yield "VOP2", op, [op << 25 | 40 << 17 | 20 << 9 | 266], vreg
    src = (256 + 30) << 18 | (256 + 20) << 9 | (256 + 10)
    if gen == "gfx9":
        for op in range(256):
            yield "SMEM", op, [0xC0000000 | op << 18 | 1 << 17 | 40 << 6 | 5, 0x10], {40: "d", 10: "s0"}
        for op in range(1024):
            yield "VOP3", op, [0xD0000000 | op << 16 | 40, src], vreg
        for op in range(128):
            yield "VOP3P", op, [0xD3800000 | op << 16 | 40, src], vreg
            for seg, fam in ((0, "FLAT"), (1, "SCRATCH"), (2, "GLOBAL")):
                for (d, s1), sa in itertools.product(_FLAT_VARIANTS, (0x7F, 0)):
                    yield fam, op, [0xDC000000 | op << 18 | seg << 14, d << 24 | sa << 16 | s1 << 8 | 10], \
                        {40: "d", 20: "s1", 10: "s0"}
            yield "MUBUF", op, [0xE0000000 | op << 18 | 1 << 12, 0x80 << 24 | 4 << 16 | 20 << 8 | 10], \
                {20: "d", 10: "s0"}
        for op in range(256):
            for d, s2, s1 in _DS_VARIANTS:
                yield "DS", op, [0xD8000000 | op << 17, d << 24 | s2 << 16 | s1 << 8 | 10], \
                    {40: "d", 30: "s2", 20: "s1", 10: "s0"}
        return
    smem = {40: "d", 10: "s0"}
    for op in range(256):
        if gen == "gfx11":
            yield "SMEM", op, [0xF4000000 | op << 18 | 40 << 6 | 5, 0xF8000010], smem
        else:
            yield "SMEM", op, [0xF4000000 | op << 13 | 40 << 6 | 5, 0xF8000010], smem
    for op in range(1024):
        yield "VOP3", op, [0xD4000000 | op << 16 | 40, src], vreg
        # v_cmpx_*_e64 writes EXEC only: LLVM decodes it with the destination field = exec_lo.
        yield "VOP3", op, [0xD4000000 | op << 16 | 0x7E, src], vreg
    for op in range(128):
        # op_sel_hi = 1 for every source, the value LLVM prints as default (gfx12 WMMA needs it).
        yield "VOP3P", op, [0xCC000000 | op << 16 | 1 << 14 | 40, src | 3 << 27], vreg
        yield "VOP3P", op, [0xCC000000 | op << 16 | 40, src], vreg
    for op in range(256):
        for d, s2, s1 in _DS_VARIANTS:
            yield "DS", op, [0xD8000000 | op << 18, d << 24 | s2 << 16 | s1 << 8 | 10], \
                {40: "d", 30: "s2", 20: "s1", 10: "s0"}
    # VOPD: opX in bits 25:22 and opY in bits 21:17 of the first dword; the other half is a
    # v_dual_mov_b32 (opcode 8 in both halves).
    for op in range(16):
        for other, s1 in ((8, 20), (4, 20), (4, 0)):
            yield "VOPDX", op, [0xC8000000 | op << 22 | other << 17 | s1 << 9 | 266,
                                40 << 24 | 21 << 17 | 22 << 9 | 267], {40: "d", 20: "s1", 10: "s0"}
    for op in range(32):
        for other, s1 in ((8, 21), (4, 21), (4, 0)):
            yield "VOPDY", op, [0xC8000000 | other << 22 | op << 17 | 20 << 9 | 266,
                                41 << 24 | 32 << 17 | s1 << 9 | 267], {64: "d", 21: "s1", 11: "s0"}
    if gen == "gfx11":
        for op in range(128):
            for seg, fam in ((0, "FLAT"), (1, "SCRATCH"), (2, "GLOBAL")):
                for d, s1 in _FLAT_VARIANTS:
                    yield fam, op, [0xDC000000 | op << 18 | seg << 16, d << 24 | 0x7C << 16 | s1 << 8 | 10], \
                        {40: "d", 20: "s1", 10: "s0"}
        for op in range(256):
            yield "MUBUF", op, [0xE0000000 | op << 18, 0x80400000 | 4 << 16 | 20 << 8 | 10], {20: "d", 10: "s0"}
    else:
        for op in range(256):
            for seg, fam in ((0, "FLAT"), (1, "SCRATCH"), (2, "GLOBAL")):
                for (d, s1), sve in itertools.product(_FLAT_VARIANTS, (0, 1 << 17)):
                    yield fam, op, [0xEC000000 | seg << 24 | op << 14 | 0x7C, s1 << 23 | d | sve, 10], \
                        {40: "d", 20: "s1", 10: "s0"}
            yield "MUBUF", op, [0xC4000000 | op << 14 | 0x7C, 0x40000000 | 4 << 9 | 20, 10], {20: "d", 10: "s0"}


GEN = {a.name: a.isa_generation for a in ARCHS.values()}  # from the arch table
_REG = re.compile(r"\b([vsa])(?:\[(\d+):(\d+)\]|(\d+))(\.[lh])?")


def _widths(text: str, fields: dict[int, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in _REG.finditer(text):
        first = int(m.group(2) or m.group(4))
        count = int(m.group(3)) - first + 1 if m.group(3) else 1
        name = fields.get(first)
        if name and name not in out:
            out[name] = -1 if m.group(5) else count  # -1: a 16-bit half register (true16)
    return out


def generate(arch: str) -> list[str]:
    temps = list(_templates(GEN[arch]))
    lines = []
    for _fam, _op, words, _f in temps:
        lines.append(",".join(f"0x{b:02x}" for w in words for b in w.to_bytes(4, "little")))
        lines.append(",".join(f"0x{b:02x}" for b in MARK_A.to_bytes(4, "little")))
        lines.append(",".join(f"0x{b:02x}" for b in MARK_B.to_bytes(4, "little")))
    proc = subprocess.run(["llvm-mc-22", "--disassemble", "-triple=amdgcn-amd-amdhsa", f"-mcpu={arch}"]
                          + (["-mattr=+wavefrontsize32,+real-true16"] if GEN[arch] != "gfx9" else []),
                          input="\n".join(lines) + "\n", capture_output=True, text=True)
    bad = {int(m.group(1)) for m in re.finditer(r"<stdin>:(\d+):\d+: warning", proc.stderr)}
    chunks: list[list[str]] = [[]]
    for line in proc.stdout.splitlines():
        line = line.strip()
        if not line or line.startswith("."):
            continue
        if line.startswith("s_nop 0x6666"):
            chunks.append([])
        elif not line.startswith("s_nop 0x7777"):
            chunks[-1].append(line)
    out = []
    seen = set()
    for i, (fam, op, _words, fields) in enumerate(temps):
        if 3 * i + 1 in bad or not chunks[i] or (fam, op) in seen:
            continue
        seen.add((fam, op))
        text = chunks[i][0]
        mnem, _, rest = text.partition(" ")
        if mnem.startswith("s_nop") and fam != "SOPP":
            continue
        if fam == "VOPDX" or fam == "VOPDY":
            parts = text.split("::")
            text = parts[0] if fam == "VOPDX" else parts[1].strip()
            mnem, _, rest = text.partition(" ")
        w = _widths(rest, fields)
        widths = ",".join(f"{k}={v}" for k, v in sorted(w.items()))
        out.append(f"{fam} {op} {mnem} {widths}".rstrip())
    # LLVM's decoder rejects a v_nop word whose unused fields are not zero, so the templates above
    # never name it; every target has it at VOP1 opcode 0 (compilers insert it for hazards).
    if ("VOP1", 0) not in seen:
        out.insert(next(i for i, row in enumerate(out) if row.startswith("VOP1 1 ")), "VOP1 0 v_nop")
    return out


def main() -> None:
    here = Path(__file__).parent
    for arch in sys.argv[1:] or ARCH_NAMES:
        rows = generate(arch)
        body = "\n".join(rows)
        (here / f"_ops_{arch}.py").write_text(
            f'"""Opcode table for {arch}, generated by gen_tables.py from LLVM\'s disassembler: '
            'family op mnemonic operand-widths."""\n\n'
            f'TABLE = """\n{body}\n"""\n')
        print(arch, len(rows))


if __name__ == "__main__":
    main()
