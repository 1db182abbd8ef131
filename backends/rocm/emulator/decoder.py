"""Binary decoder: instruction words -> `Inst` (family, opcode, mnemonic, operand fields).

The (family, opcode) -> mnemonic tables are per arch (``_ops_<arch>.py``, generated once from
LLVM's disassembler by gen_tables.py); the bit layouts of each encoding family are written out
here per ISA generation: "gfx9" (gfx90a/gfx942/gfx950), "gfx11" and "gfx12".
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field

from tiledsl.backends.rocm.arch import ARCHS
from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction

GENERATION = {a.name: a.isa_generation for a in ARCHS.values()}  # from the arch table

_SUFFIX = re.compile(r"(_e32|_e64|_dpp|_sdwa)+$")


@dataclass(eq=False)
class Inst:
    addr: int  # byte offset in the code object
    size: int  # bytes
    fam: str
    op: int
    name: str  # mnemonic without _e32/_e64/_dpp/_sdwa
    widths: dict[str, int]  # operand field -> dwords (from the table); -1 = 16-bit half register
    f: dict[str, int] = field(default_factory=dict)  # raw fields
    lit: int | None = None  # the 32-bit literal constant, if any
    dpp: dict[str, int] | None = None
    sdwa: dict[str, int] | None = None
    raw_name: str = ""
    xy: tuple[str, str] = ()  # VOPD: the X and Y mnemonics

    def __str__(self) -> str:
        return f"{self.raw_name or self.name} @0x{self.addr:x}"


_TABLES: dict[str, dict[tuple[str, int], tuple[str, dict[str, int]]]] = {}


# Cache-control instructions without operands: the generator's templates fill register fields,
# which LLVM's decoder rejects for these, so they are listed here (encodings checked with llvm-mc).
_CACHE_CONTROL = {
    "gfx90a": {("MUBUF", 40): "buffer_wbl2", ("MUBUF", 62): "buffer_wbinvl1", ("MUBUF", 63): "buffer_wbinvl1_vol"},
    "gfx942": {("MUBUF", 40): "buffer_wbl2", ("MUBUF", 41): "buffer_inv"},
    "gfx950": {("MUBUF", 40): "buffer_wbl2", ("MUBUF", 41): "buffer_inv"},
    "gfx1100": {("MUBUF", 43): "buffer_gl0_inv", ("MUBUF", 44): "buffer_gl1_inv"},
    "gfx1201": {},
}


# Opcodes the generator's templates miss because LLVM decodes them only as part of a pair: gfx950's
# v_mfma_ld_scale_b32, the prefix of a scaled MFMA (v_mfma_scale_f32_*_f8f6f4). Decoding it lets a
# kernel load and name it as unsupported instead of failing to decode.
_PAIRED = {"gfx950": {("VOP3P", 44): ("v_mfma_ld_scale_b32", {"s0": 1, "s1": 1})}}


def opcode_table(arch: str) -> dict[tuple[str, int], tuple[str, dict[str, int]]]:
    if arch not in _TABLES:
        text = importlib.import_module(f"tiledsl.backends.rocm.emulator._ops_{arch}").TABLE
        table: dict[tuple[str, int], tuple[str, dict[str, int]]] = {}
        for line in text.strip().splitlines():
            parts = line.split()
            widths = {}
            if len(parts) > 3:
                for kv in parts[3].split(","):
                    k, v = kv.split("=")
                    widths[k] = int(v)
            table[(parts[0], int(parts[1]))] = (parts[2], widths)
        for key, name in _CACHE_CONTROL.get(arch, {}).items():
            table.setdefault(key, (name, {}))
        for key, entry in _PAIRED.get(arch, {}).items():
            table.setdefault(key, entry)
        _TABLES[arch] = table
    return _TABLES[arch]


def _sext(v: int, bits: int) -> int:
    return v - (1 << bits) if v & (1 << (bits - 1)) else v


class Decoder:
    def __init__(self, arch: str) -> None:
        self.arch = arch
        self.gen = GENERATION[arch]
        self.scratch_sve = ARCHS[arch].scratch_sve
        self.table = opcode_table(arch)

    def decode_all(self, code: bytes, start: int, base_addr: int) -> list[Inst]:
        """Decode from `start` until s_endpgm/s_code_end and past every branch target."""
        words = memoryview(code).cast("I") if len(code) % 4 == 0 else memoryview(code[:len(code) & ~3]).cast("I")
        out = []
        pos = start // 4
        furthest = pos
        n = len(words)
        while pos < n:
            inst = self.decode(words, pos, base_addr)
            out.append(inst)
            pos += inst.size // 4
            if inst.fam == "SOPP" and inst.name.startswith(("s_branch", "s_cbranch")):
                tgt = pos + _sext(inst.f["simm16"], 16)
                furthest = max(furthest, tgt)
            if inst.name in ("s_endpgm", "s_code_end") and pos > furthest:
                break
        return out

    # ------------------------------------------------------------------------------------
    def decode(self, words, pos: int, base_addr: int) -> Inst:
        w0 = words[pos]
        fam = self._family(w0)
        method = getattr(self, "_" + fam.lower(), None)
        if method is None:
            raise UnsupportedInstruction(
                f"{self.arch}: unsupported encoding family {fam} (word 0x{w0:08x}) at 0x{base_addr + pos * 4:x}")
        f, nwords, op = method(words, pos, w0)
        if fam in ("FLAT", "VFLAT"):
            key = (("FLAT", "SCRATCH", "GLOBAL", "?")[f["seg"]], op)
        else:
            key = ("MUBUF" if fam == "VBUFFER" else "VOPDX" if fam == "VOPD" else fam, op)
        entry = self.table.get(key)
        if entry is None:
            raise UnsupportedInstruction(
                f"{self.arch}: cannot decode {key[0]} opcode {op} (word 0x{w0:08x}) at 0x{base_addr + pos * 4:x}")
        raw_name, widths = entry
        inst = Inst(base_addr + pos * 4, 0, key[0], op, _SUFFIX.sub("", raw_name), widths, f, raw_name=raw_name)
        if fam == "VOPD":
            yentry = self.table.get(("VOPDY", f["opy"]))
            if yentry is None:
                raise UnsupportedInstruction(
                    f"{self.arch}: cannot decode VOPD Y opcode {f['opy']} at 0x{base_addr + pos * 4:x}")
            inst.fam, inst.name = "VOPD", "vopd"
            inst.xy = (raw_name, yentry[0])
            inst.raw_name = f"{raw_name} :: {yentry[0]}"
        # Optional trailing dwords: DPP/SDWA control word, then a literal constant.
        extra = nwords
        if fam in ("VOP1", "VOP2", "VOPC") or (fam in ("VOP3", "VOP3P") and self.gen != "gfx9"):
            s0 = f.get("src0", 0)
            if s0 == 250 and "dpp" not in f:  # DPP16
                d = words[pos + extra]
                extra += 1
                inst.dpp = {"src0": d & 0xFF, "ctrl": (d >> 8) & 0x1FF, "fi": (d >> 18) & 1, "bc": (d >> 19) & 1,
                            "neg0": (d >> 20) & 1, "abs0": (d >> 21) & 1, "neg1": (d >> 22) & 1,
                            "abs1": (d >> 23) & 1, "bank": (d >> 24) & 0xF, "row": (d >> 28) & 0xF}
                f["src0"] = 256 + (d & 0xFF)
            elif s0 in (233, 234) and self.gen != "gfx9":  # DPP8 (234: fetch inactive)
                d = words[pos + extra]
                extra += 1
                inst.dpp = {"src0": d & 0xFF, "dpp8": (d >> 8) & 0xFFFFFF, "fi": int(s0 == 234)}
                f["src0"] = 256 + (d & 0xFF)
            elif s0 == 249 and self.gen == "gfx9":  # SDWA
                d = words[pos + extra]
                extra += 1
                inst.sdwa = {"dst_sel": (d >> 8) & 7, "dst_unused": (d >> 11) & 3, "clamp": (d >> 13) & 1,
                             "omod": (d >> 14) & 3, "sel0": (d >> 16) & 7, "sext0": (d >> 19) & 1,
                             "neg0": (d >> 20) & 1, "abs0": (d >> 21) & 1, "sel1": (d >> 24) & 7,
                             "sext1": (d >> 27) & 1, "neg1": (d >> 28) & 1, "abs1": (d >> 29) & 1,
                             "sdst": (d >> 8) & 0x7F, "sd": (d >> 15) & 1}
                f["src0"] = (d & 0xFF) + (0 if (d >> 23) & 1 else 256)
                if fam == "VOP2" or fam == "VOPC":
                    f["src1"] = (f["src1"] & 0xFF) + (0 if (d >> 31) & 1 else 256)
        if inst.sdwa is not None:
            inst.raw_name = inst.name + "_sdwa"
        elif inst.dpp is not None:
            inst.raw_name = inst.name + ("_e64_dpp" if fam in ("VOP3", "VOP3P") else "_dpp")
        if fam in ("SOP2", "SOP1", "SOPC", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "VOPD"):
            needs = any(f.get(k) == 255 for k in ("src0", "src1", "src2", "src0y", "src1y"))
            if fam in ("VOP2", "SOP2") and inst.name in _K_OPS or fam == "VOPD" and any(map(_has_k, inst.xy)):
                needs = True
            if needs:
                inst.lit = words[pos + extra]
                extra += 1
        elif fam == "SOPK" and inst.name.startswith("s_setreg_imm32"):
            inst.lit = words[pos + extra]
            extra += 1
        inst.size = extra * 4
        return inst

    def _family(self, w: int) -> str:
        if w >> 31 == 0:
            top7 = w >> 25
            return "VOP1" if top7 == 0x3F else "VOPC" if top7 == 0x3E else "VOP2"
        if w >> 30 == 2:
            top9 = w >> 23
            if top9 == 0x17D:
                return "SOP1"
            if top9 == 0x17E:
                return "SOPC"
            if top9 == 0x17F:
                return "SOPP"
            return "SOPK" if w >> 28 == 0xB else "SOP2"
        top6 = w >> 26
        if self.gen == "gfx9":
            return {0x30: "SMEM", 0x34: "VOP3P" if w >> 23 == 0x1A7 else "VOP3", 0x36: "DS", 0x37: "FLAT",
                    0x38: "MUBUF", 0x3A: "MTBUF", 0x3C: "MIMG"}.get(top6, f"UNKNOWN{top6:x}")
        common = {0x3D: "SMEM", 0x35: "VOP3", 0x33: "VOP3P", 0x32: "VOPD", 0x36: "DS"}
        if self.gen == "gfx11":
            common.update({0x37: "FLAT", 0x38: "MUBUF", 0x3A: "MTBUF", 0x3C: "MIMG"})
        else:
            common.update({0x3B: "VFLAT", 0x31: "VBUFFER"})
        if top6 == 0x33 and (w >> 24) & 0xFF != 0xCC:
            return "VINTERP"
        return common.get(top6, f"UNKNOWN{top6:x}")

    # -- scalar ---------------------------------------------------------------------------
    def _sop2(self, words, pos, w):
        return {"sdst": (w >> 16) & 0x7F, "src0": w & 0xFF, "src1": (w >> 8) & 0xFF}, 1, (w >> 23) & 0x7F

    def _sopk(self, words, pos, w):
        return {"sdst": (w >> 16) & 0x7F, "simm16": w & 0xFFFF}, 1, (w >> 23) & 0x1F

    def _sop1(self, words, pos, w):
        return {"sdst": (w >> 16) & 0x7F, "src0": w & 0xFF}, 1, (w >> 8) & 0xFF

    def _sopc(self, words, pos, w):
        return {"src0": w & 0xFF, "src1": (w >> 8) & 0xFF}, 1, (w >> 16) & 0x7F

    def _sopp(self, words, pos, w):
        return {"simm16": w & 0xFFFF}, 1, (w >> 16) & 0x7F

    def _smem(self, words, pos, w):
        w1 = words[pos + 1]
        f = {"sbase": (w & 0x3F) * 2, "sdata": (w >> 6) & 0x7F}
        if self.gen == "gfx9":
            imm, soe = (w >> 17) & 1, (w >> 14) & 1
            f["offset"] = _sext(w1 & 0x1FFFFF, 21) if imm else None
            f["soff_reg"] = (w1 >> 25) & 0x7F if soe else (w1 & 0x7F if not imm else None)
            return f, 2, (w >> 18) & 0xFF
        f["offset"] = _sext(w1 & (0x1FFFFF if self.gen == "gfx11" else 0xFFFFFF), 21 if self.gen == "gfx11" else 24)
        f["soff_reg"] = (w1 >> 25) & 0x7F
        return f, 2, ((w >> 18) if self.gen == "gfx11" else (w >> 13)) & 0xFF

    # -- vector ALU -----------------------------------------------------------------------
    def _vop2(self, words, pos, w):
        return {"vdst": (w >> 17) & 0xFF, "src1": 256 + ((w >> 9) & 0xFF), "src0": w & 0x1FF}, 1, (w >> 25) & 0x3F

    def _vop1(self, words, pos, w):
        return {"vdst": (w >> 17) & 0xFF, "src0": w & 0x1FF}, 1, (w >> 9) & 0xFF

    def _vopc(self, words, pos, w):
        return {"src1": 256 + ((w >> 9) & 0xFF), "src0": w & 0x1FF}, 1, (w >> 17) & 0xFF

    def _vop3(self, words, pos, w):
        w1 = words[pos + 1]
        f = {"vdst": w & 0xFF, "abs": (w >> 8) & 7, "opsel": (w >> 11) & 0xF, "sdst": (w >> 8) & 0x7F,
             "clamp": (w >> 15) & 1, "src0": w1 & 0x1FF, "src1": (w1 >> 9) & 0x1FF, "src2": (w1 >> 18) & 0x1FF,
             "omod": (w1 >> 27) & 3, "neg": (w1 >> 29) & 7}
        op = (w >> 16) & 0x3FF
        return f, 2, op

    def _vop3p(self, words, pos, w):
        w1 = words[pos + 1]
        f = {"vdst": w & 0xFF, "neg_hi": (w >> 8) & 7, "opsel": (w >> 11) & 7, "opsel_hi2": (w >> 14) & 1,
             "clamp": (w >> 15) & 1, "src0": w1 & 0x1FF, "src1": (w1 >> 9) & 0x1FF, "src2": (w1 >> 18) & 0x1FF,
             "opsel_hi": (w1 >> 27) & 3, "neg": (w1 >> 29) & 7,
             # MAI (gfx90a+) reuses bits: cbsz, abid, acc_cd, acc (A/B in AGPRs), blgp
             "cbsz": (w >> 8) & 7, "abid": (w >> 11) & 0xF, "acc_cd": (w >> 15) & 1, "acc": (w1 >> 27) & 3,
             "blgp": (w1 >> 29) & 7}
        return f, 2, (w >> 16) & 0x7F

    def _vopd(self, words, pos, w):
        w1 = words[pos + 1]
        vdstx = (w1 >> 24) & 0xFF
        f = {"opx": (w >> 22) & 0xF, "opy": (w >> 17) & 0x1F, "src1": 256 + ((w >> 9) & 0xFF), "src0": w & 0x1FF,
             "vdst": vdstx, "vdsty": (((w1 >> 17) & 0x7F) << 1) | ((vdstx & 1) ^ 1),
             "src1y": 256 + ((w1 >> 9) & 0xFF), "src0y": w1 & 0x1FF}
        return f, 2, f["opx"]

    # -- memory ---------------------------------------------------------------------------
    def _ds(self, words, pos, w):
        w1 = words[pos + 1]
        op = (w >> 17) & 0xFF if self.gen == "gfx9" else (w >> 18) & 0xFF
        f = {"offset0": w & 0xFF, "offset1": (w >> 8) & 0xFF, "addr": w1 & 0xFF, "data0": (w1 >> 8) & 0xFF,
             "data1": (w1 >> 16) & 0xFF, "vdst": (w1 >> 24) & 0xFF,
             "acc": (w >> 25) & 1 if self.gen == "gfx9" else 0,
             "gds": (w >> 16) & 1 if self.gen == "gfx9" else (w >> 17) & 1 if self.gen == "gfx11" else 0}
        return f, 2, op

    def _flat(self, words, pos, w):
        w1 = words[pos + 1]
        if self.gen == "gfx9":
            seg = (w >> 14) & 3
            off = w & 0x1FFF
            # gfx940+: bit 13 of a scratch instruction is SVE (VADDR in use); gfx90a has none.
            sve = (w >> 13) & 1 if seg == 1 and self.scratch_sve else 0
            # Bit 13 is gfx90a's LDS bit (data to LDS at M0); gfx940+ has separate *_lds_* opcodes.
            lds = (w >> 13) & 1 if not (seg == 1 and self.scratch_sve) else 0
            f = {"seg": seg, "offset": _sext(off, 13) if seg else off & 0xFFF, "saddr": (w1 >> 16) & 0x7F,
                 "acc": (w1 >> 23) & 1, "sve": sve, "null": 0x7F, "glc": (w >> 16) & 1, "lds": lds}
            op = (w >> 18) & 0x7F
        else:
            seg = (w >> 16) & 3
            f = {"seg": seg, "offset": _sext(w & 0x1FFF, 13), "saddr": (w1 >> 16) & 0x7F, "acc": 0,
                 "sve": (w1 >> 23) & 1, "null": 0x7C, "glc": (w >> 14) & 1}
            op = (w >> 18) & 0x7F
        f.update({"addr": w1 & 0xFF, "data": (w1 >> 8) & 0xFF, "vdst": (w1 >> 24) & 0xFF})
        return f, 2, op

    def _vflat(self, words, pos, w):
        w1, w2 = words[pos + 1], words[pos + 2]
        f = {"seg": (w >> 24) & 3, "saddr": w & 0x7F, "vdst": w1 & 0xFF, "data": (w1 >> 23) & 0xFF,
             "sve": (w1 >> 17) & 1, "addr": w2 & 0xFF, "offset": _sext(w2 >> 8, 24), "acc": 0, "null": 0x7C,
             "glc": (w1 >> 20) & 1}
        return f, 3, (w >> 14) & 0xFF

    def _mubuf(self, words, pos, w):
        w1 = words[pos + 1]
        f = {"offset": w & 0xFFF, "vaddr": w1 & 0xFF, "vdata": (w1 >> 8) & 0xFF, "srsrc": ((w1 >> 16) & 0x1F) * 4,
             "soffset": (w1 >> 24) & 0xFF}
        if self.gen == "gfx9":
            f.update({"offen": (w >> 12) & 1, "idxen": (w >> 13) & 1, "acc": (w1 >> 23) & 1, "lds": (w >> 16) & 1,
                      "glc": (w >> 14) & 1})
            return f, 2, (w >> 18) & 0x7F
        f.update({"offen": (w1 >> 22) & 1, "idxen": (w1 >> 23) & 1, "acc": 0, "lds": (w >> 16) & 1,
                  "glc": (w >> 14) & 1, "tfe": (w1 >> 21) & 1})
        return f, 2, (w >> 18) & 0xFF

    def _vbuffer(self, words, pos, w):
        w1, w2 = words[pos + 1], words[pos + 2]
        f = {"soffset": w & 0x7F, "vdata": w1 & 0xFF, "srsrc": (w1 >> 9) & 0x7F, "idxen": (w1 >> 31) & 1,
             "offen": (w1 >> 30) & 1, "vaddr": w2 & 0xFF, "offset": w2 >> 8, "acc": 0, "lds": 0,
             "glc": (w1 >> 20) & 1, "tfe": (w >> 22) & 1}
        return f, 3, (w >> 14) & 0xFF


# Instructions whose literal constant K follows them whatever their operands are.
_K_OPS = {"v_madmk_f32", "v_madak_f32", "v_fmamk_f32", "v_fmaak_f32", "v_madmk_f16", "v_madak_f16",
          "v_fmamk_f16", "v_fmaak_f16", "s_fmaak_f32", "s_fmamk_f32"}


def _has_k(name: str) -> bool:
    return name in ("v_dual_fmaak_f32", "v_dual_fmamk_f32")
