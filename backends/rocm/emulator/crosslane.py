"""Cross-lane operations: DPP16/DPP8 source permutation, readlane/writelane, mbcnt, permlane,
swaps and AGPR moves (the instructions LLVM emits for reductions and for MFMA accumulators)."""

from __future__ import annotations

import functools

import numpy as np

from tiledsl.backends.rocm.emulator.executor import builder
from tiledsl.backends.rocm.emulator.memory import UnsupportedInstruction
from tiledsl.backends.rocm.emulator.operands import M32, scalar_reader, scalar_writer, vdst, vsrc


@functools.cache
def dpp16_perm(ctrl: int, W: int) -> tuple[np.ndarray, np.ndarray]:
    """(source lane per lane, statically valid) for a DPP16 control value. Rows are 16 lanes."""
    lanes = np.arange(W)
    row, r = lanes // 16 * 16, lanes % 16
    valid = np.ones(W, dtype=bool)
    if ctrl <= 0xFF:  # quad_perm
        src = (lanes & ~3) | ((ctrl >> (2 * (lanes & 3))) & 3)
    elif 0x101 <= ctrl <= 0x10F:  # row_shl: lane reads lane + n of its row
        n = ctrl & 0xF
        src, valid = lanes + n, r + n < 16
    elif 0x111 <= ctrl <= 0x11F:  # row_shr
        n = ctrl & 0xF
        src, valid = lanes - n, r - n >= 0
    elif 0x121 <= ctrl <= 0x12F:  # row_ror
        n = ctrl & 0xF
        src = row + (r - n) % 16
    elif ctrl == 0x130:  # wave_shl1
        src, valid = lanes + 1, lanes + 1 < W
    elif ctrl == 0x134:  # wave_rol1
        src = (lanes + 1) % W
    elif ctrl == 0x138:  # wave_shr1
        src, valid = lanes - 1, lanes >= 1
    elif ctrl == 0x13C:  # wave_ror1
        src = (lanes - 1) % W
    elif ctrl == 0x140:  # row_mirror
        src = row + 15 - r
    elif ctrl == 0x141:  # row_half_mirror
        src = (lanes & ~7) + 7 - (lanes & 7)
    elif ctrl == 0x142:  # row_bcast15: lane 15 of the previous row
        src, valid = row - 1, row >= 16
    elif ctrl == 0x143:  # row_bcast31: lane 31 to rows 2 and 3
        src, valid = np.full(W, 31), lanes >= 32
    elif 0x150 <= ctrl <= 0x15F:  # row_share
        src = row + (ctrl & 0xF)
    elif 0x160 <= ctrl <= 0x16F:  # row_xmask
        src = row + (r ^ (ctrl & 0xF))
    else:
        raise UnsupportedInstruction(f"DPP control 0x{ctrl:x}")
    src = np.where(valid, src, 0).astype(np.int64) % W
    return src, valid


@functools.cache
def dpp8_perm(sel: int, W: int) -> np.ndarray:
    lanes = np.arange(W)
    return (lanes & ~7) | ((sel >> (3 * (lanes & 7))) & 7)


def refuse_dpp_sdwa(inst) -> None:
    """For builders that read their operands directly (not through valu._reader): a DPP or SDWA
    form would otherwise run as the plain instruction, unpermuted and unselected."""
    if inst.dpp is not None or inst.sdwa is not None:
        raise UnsupportedInstruction(f"{inst.raw_name}: DPP/SDWA on this instruction is not modelled")


def dpp_reader(inst, ctx, enc, typ, hi):
    """Source 0 read through the DPP lane permutation; records which lanes got a valid source."""
    from tiledsl.backends.rocm.emulator.valu import typed_from_bits

    d, W = inst.dpp, ctx.wave_size
    if enc < 256 or typ in ("f64", "u64", "i64", "b64"):
        raise UnsupportedInstruction(f"DPP on a {typ} operand")
    r = enc - 256
    if "dpp8" in d:
        src, static = dpp8_perm(d["dpp8"], W), np.ones(W, dtype=bool)
    else:
        src, static = dpp16_perm(d["ctrl"], W)
    fi = bool(d.get("fi", 0))
    sh = np.uint32(16 if hi else 0)

    def rd(w):
        raw = w.v[r][src]
        valid = static if fi else static & w.mask[src]
        w.dppvalid = valid
        if not valid.all():
            raw = np.where(valid, raw, np.uint32(0))
        if sh:
            raw = raw >> sh
        return typed_from_bits(raw, typ)
    return rd


def dpp_write_mask(inst, ctx):
    """Lanes a DPP instruction writes: EXEC & row_mask & bank_mask & (valid source or bound_ctrl)."""
    d, W = inst.dpp, ctx.wave_size
    lanes = np.arange(W)
    if "dpp8" in d:
        static = np.ones(W, dtype=bool)
        bc = True
    else:
        static = (((d["row"] >> (lanes // 16)) & 1) == 1) & (((d["bank"] >> ((lanes & 15) >> 2)) & 1) == 1)
        bc = bool(d["bc"])

    def m(w):
        out = w.mask & static
        if not bc:
            out = out & w.dppvalid
        return out
    return m


@builder("v_readlane_b32", "v_readfirstlane_b32")
def _b_readlane(inst, ctx):
    f, nxt, W = inst.f, ctx.nxt, ctx.wave_size
    if f["src0"] < 256:
        raise UnsupportedInstruction("readlane of a non-VGPR")
    r = f["src0"] - 256
    wr = scalar_writer(f["vdst"], ctx)
    if inst.name == "v_readfirstlane_b32":
        def h_first(w):
            e = w.exec
            lane = (e & -e).bit_length() - 1 if e else 0
            wr(w, int(w.v[r, lane]))
            return nxt
        return h_first
    sel = scalar_reader(f["src1"], ctx, inst.lit)

    def h(w):
        wr(w, int(w.v[r, sel(w) % W]))
        return nxt
    return h


@builder("v_writelane_b32")
def _b_writelane(inst, ctx):
    f, nxt, W = inst.f, ctx.nxt, ctx.wave_size
    val = scalar_reader(f["src0"], ctx, inst.lit)
    sel = scalar_reader(f["src1"], ctx, inst.lit)
    d = f["vdst"]

    def h(w):
        w.v[d, sel(w) % W] = val(w) & M32
        return nxt
    return h


@builder("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32")
def _b_mbcnt(inst, ctx):
    f, nxt, W = inst.f, ctx.nxt, ctx.wave_size
    # The mask is usually an SGPR pair's half, but VOP3 takes any source, a VGPR too (a mask per
    # lane: Triton's atomics count the lanes below with a mask it computed per lane).
    mask = vsrc(f["src0"], "u32", ctx, inst.lit)
    add = vsrc(f["src1"], "u32", ctx, inst.lit)
    wr = vdst(f["vdst"], "u32", ctx)
    lanes = np.arange(W)
    hi = inst.name.endswith("hi_u32_b32")
    # Bits of the 32-bit mask below each lane's position in that half of the wave.
    below = np.clip((lanes - 32) if hi else lanes, 0, 32)
    under = (np.uint64(1) << below.astype(np.uint64)) - np.uint64(1)

    def h(w):
        m = np.broadcast_to(np.asarray(mask(w), dtype=np.uint64), (W,)) & under
        bits = (m[:, None] >> np.arange(32, dtype=np.uint64)) & np.uint64(1)
        wr(w, bits.sum(axis=1).astype(np.int64) + np.asarray(add(w), dtype=np.int64))
        return nxt
    return h


@builder("v_permlane16_b32", "v_permlanex16_b32")
def _b_permlane(inst, ctx):
    f, nxt, W = inst.f, ctx.nxt, ctx.wave_size
    r = f["src0"] - 256
    s1, s2 = scalar_reader(f["src1"], ctx, inst.lit), scalar_reader(f["src2"], ctx, inst.lit)
    fi, bc = f["opsel"] & 1, (f["opsel"] >> 1) & 1
    wr = vdst(f["vdst"], "u32", ctx)
    lanes = np.arange(W)
    row = lanes // 16
    other = (row ^ 1) if inst.name == "v_permlanex16_b32" else row

    def h(w):
        sel64 = s1(w) | (s2(w) << 32)
        sel = np.array([(sel64 >> (4 * i)) & 0xF for i in range(16)])[lanes % 16]
        src = other * 16 + sel
        val = w.v[r][src]
        ok = np.ones(W, dtype=bool) if fi else w.mask[src]
        if bc:
            val = np.where(ok, val, 0)
            wr(w, val)
        else:
            wr(w, val, w.mask & ok)
        return nxt
    return h


@builder("v_permlane32_swap_b32", "v_permlane16_swap_b32")
def _b_permlane_swap(inst, ctx):
    f, nxt = inst.f, ctx.nxt
    d, s = f["vdst"], f["src0"] - 256
    rows16 = inst.name == "v_permlane16_swap_b32"

    def h(w):
        a, b = w.v[d].copy(), w.v[s].copy()
        if rows16:  # odd rows of vdst <-> even rows of src0
            for k in range(0, w.W // 16, 2):
                a[(k + 1) * 16:(k + 2) * 16], b[k * 16:(k + 1) * 16] = \
                    w.v[s][k * 16:(k + 1) * 16], w.v[d][(k + 1) * 16:(k + 2) * 16]
        else:  # upper 32 lanes of vdst <-> lower 32 lanes of src0
            a[32:], b[:32] = w.v[s][:32], w.v[d][32:]
        w.v[d], w.v[s] = a, b
        return nxt
    return h


@builder("v_swap_b32")
def _b_swap(inst, ctx):
    refuse_dpp_sdwa(inst)
    f, nxt = inst.f, ctx.nxt
    d, s = f["vdst"], f["src0"] - 256

    def h(w):
        a, b = w.v[d].copy(), w.v[s].copy()
        np.copyto(w.v[d], b, where=w.mask)
        np.copyto(w.v[s], a, where=w.mask)
        return nxt
    return h


@builder("v_accvgpr_read_b32", "v_accvgpr_write_b32", "v_accvgpr_mov_b32", "v_accvgpr_read", "v_accvgpr_write")
def _b_acc(inst, ctx):
    f, nxt = inst.f, ctx.nxt
    name = inst.name
    src_acc = name in ("v_accvgpr_read_b32", "v_accvgpr_read", "v_accvgpr_mov_b32")
    dst_acc = name != "v_accvgpr_read_b32" and name != "v_accvgpr_read"
    rd = vsrc(f["src0"], "u32", ctx, inst.lit, acc=src_acc and f["src0"] >= 256)
    wr = vdst(f["vdst"] + (256 if dst_acc else 0), "u32", ctx)

    def h(w):
        wr(w, rd(w))
        return nxt
    return h
