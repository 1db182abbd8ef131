"""What the kernel library can build: variant keys, per-arch tile tables, validation, receipts.

A variant of a library family is a `Signature` (what a call needs: dtype, batch or group mode,
head dims, mask, features) on one arch; its `Algorithm` (tile sizes, waves, stages) comes from
the per-arch tables (`kernels/fmha_configs.py` for the forward, `fmha_bwd.BWD_CONFIGS` for the
backward), so the registry never holds a second copy of a tile. `validate` refuses an
unsupported combination before anything compiles, naming the field and what is supported.
`RECEIPTS` are named sets of variants (`tiledsl prebuild --receipt NAME`), `arch_specs` exports
the tables as JSON (`tiledsl registry export`), and `Variant.build` compiles every kernel a call
of that signature may launch, through the same functions the ops use at run time.

Shape-driven choices are built both ways: the forward's GQA packing (short queries), split-KV
producers and the combine's decode tile (the split heuristic), small and large KV-cache pages,
under a causal mask the backward's paired key blocks of large grids (tiledsl.pairing), and the
forward's wider query tile of large unmasked grids (fmha_configs.WIDE).
Prebuilt variants serve calls with contiguous head dims and 16-byte aligned strides; other
strides compile their own variant on first use.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.pairing import CAUSAL_KINDS

FAMILIES: dict[str, str] = {
    "fmha_fwd": "forward, one stage (tiledsl.ops.fmha_fwd with num_splits=1)",
    "fmha_fwd_splitkv": "forward, split-KV producers + combine (fmha_fwd's split heuristic, decode)",
    "fmha_fwd_kvcache": "forward against a KV cache: append, rotary, attention (tiledsl.ops.fmha_fwd_kvcache)",
    "fmha_bwd": "backward: dot_do_o -> dq_dk_dv -> convert_dq (+ dsink) (tiledsl.ops.fmha_bwd)",
}
DTYPES = ("f16", "bf16")
MODES = ("batch", "group")
MASKS = ("none", "causal", "top_left", "window")  # causal: bottom-right, flash-attention's causal=True (prebuild.MASKS)
ROTARY = ("none", "interleaved", "half")
BIASES = ("none", "tensor", "alibi")  # an additive bias tensor or ALiBi slopes (docs/bias.md)
MAX_HDIM = 256
# Features a family does not have (yet): each refused with the reason.
NOT_YET: dict[str, str] = {}  # features a variant may name that the library does not build yet
FP8 = "f8e4m3"  # the fp8 forward's dtype (docs/fp8.md): e4m3 in the arch's flavour
FP8_FAMILIES = ("fmha_fwd", "fmha_fwd_splitkv")


@dataclass(frozen=True)
class Signature:
    """What a call needs from a kernel family (the -D switches it selects, in call terms)."""

    family: str
    dtype: str = "f16"
    mode: str = "batch"  # "group": varlen (cu_seqlens); fmha_fwd_kvcache: batch prefill
    hdim_q: int = 128
    hdim_v: int = 128
    mask: str = "none"
    lse: bool = False  # forward families: also return the LSE
    sink: bool = False
    softcap: bool = False
    paged: bool = False  # fmha_fwd_kvcache: paged cache (else contiguous)
    rotary: str = "none"  # fmha_fwd_kvcache: rotary embedding of q and the appended k
    deterministic: bool = False  # fmha_bwd: no atomics
    bias: str = "none"  # "tensor" (any of q's dtype or f32; fmha_bwd with and without dbias) or "alibi"
    dropout: bool = False

    def name(self) -> str:
        """Human-readable and unique: fmha_fwd-bf16-group-d128-causal-lse."""
        hd = f"d{self.hdim_q}" if self.hdim_q == self.hdim_v else f"d{self.hdim_q}x{self.hdim_v}"
        parts = [self.family, self.dtype, self.mode, hd, self.mask]
        flags = ("lse", "sink", "softcap", "paged", "deterministic", "dropout")
        parts += [f for f in flags if getattr(self, f)]
        parts += [f"rotary_{self.rotary}"] if self.rotary != "none" else []
        parts += [f"bias_{self.bias}"] if self.bias != "none" else []
        return "-".join(parts)


@dataclass(frozen=True)
class Algorithm:
    """How a variant computes: its main kernel's tile (the other stages are elementwise)."""

    block_m: int
    block_n: int
    waves: int
    stages: int
    spills: bool = False  # the best tile found still spills registers (RDNA backward, see docs/backward.md)
    occupancy: int = 0  # waves per SIMD the kernel is compiled for (a target: docs/language.md); 0: LLVM's choice
    reuse: bool = False  # the next K/V tiles load into the current ones' registers (stages(2, reuse=true))


def validate(arch: str, sig: Signature) -> None:
    """Refuse what the library cannot build, before compiling: a ValueError naming the field."""
    if arch not in ARCH_NAMES:
        raise ValueError(f"arch: expected one of {', '.join(ARCH_NAMES)}, got {arch!r}")
    a = get_arch(arch)
    if sig.family not in FAMILIES:
        raise ValueError(f"family: expected one of {', '.join(FAMILIES)}, got {sig.family!r}")
    has = f"{arch} has {a.fp8_flavour.upper()} fp8 matrix instructions" if a.fp8_flavour else \
        f"{arch} has no fp8 matrix instructions (fp8 needs gfx942, gfx950 or gfx1201)"
    if sig.dtype == FP8:
        if not a.fp8_flavour:
            raise ValueError(f"dtype: {has}")
        if sig.family not in FP8_FAMILIES:
            raise ValueError(f"dtype: {FP8} is for the forward ({', '.join(FP8_FAMILIES)}), not {sig.family}")
    elif sig.dtype not in DTYPES:
        if sig.dtype in ("fp8", "f8", "e4m3"):
            raise ValueError(f"dtype: fp8 variants are named {FP8} ({has}); expected one of "
                             f"{', '.join(DTYPES)}, {FP8}")
        raise ValueError(f"dtype: {arch} supports {', '.join(DTYPES)} for {sig.family}, got {sig.dtype!r}")
    for field_name, value, allowed in (("mode", sig.mode, MODES), ("mask", sig.mask, MASKS),
                                       ("rotary", sig.rotary, ROTARY), ("bias", sig.bias, BIASES)):
        if value not in allowed:
            raise ValueError(f"{field_name}: expected one of {', '.join(allowed)}, got {value!r}")
    for field_name in ("hdim_q", "hdim_v"):
        d = getattr(sig, field_name)
        if not isinstance(d, int) or not 1 <= d <= MAX_HDIM:
            raise ValueError(f"{field_name}: {sig.family} supports head dims 1..{MAX_HDIM} on every arch, got {d}")
    if sig.bias == "tensor" and sig.family == "fmha_fwd_kvcache":
        raise ValueError("bias: fmha_fwd_kvcache takes ALiBi slopes but no bias tensor (as flash_attn_with_kvcache); "
                         "expected 'none' or 'alibi'")
    if sig.dropout and sig.family == "fmha_fwd_kvcache":
        raise ValueError("dropout: fmha_fwd_kvcache has none (as flash_attn_with_kvcache); expected False")
    only = {"paged": "fmha_fwd_kvcache", "deterministic": "fmha_bwd"}
    for field_name, family in only.items():
        if getattr(sig, field_name) and sig.family != family:
            raise ValueError(f"{field_name}: only {family} has it, not {sig.family}")
    if sig.rotary != "none" and sig.family != "fmha_fwd_kvcache":
        raise ValueError(f"rotary: only fmha_fwd_kvcache has it, not {sig.family}")
    if sig.lse and sig.family == "fmha_bwd":
        raise ValueError("lse: the backward always reads the forward's LSE; leave it False")


def algorithm(arch: str, sig: Signature) -> Algorithm:
    """The variant's tile, read from the per-arch tables the kernels compile with."""
    validate(arch, sig)
    if sig.family == "fmha_bwd":
        from tiledsl.fmha_bwd import bwd_config

        # (with dbias, CDNA's hdim 128 row has 16 query rows)
        b = bwd_config(arch, sig.hdim_q, sig.hdim_v, dropout=sig.dropout, bias=sig.bias != "none")
        return Algorithm(b.block_m, b.block_n, b.waves, 1, b.spills)
    from tiledsl.kernels.fmha_configs import fmha_config

    c = fmha_config(arch, sig.hdim_q, sig.hdim_v, masked=sig.mask != "none", bias=sig.bias, dropout=sig.dropout)
    # spills stays False: the forward's rows fit the tuned feature mixes in registers; a mix that
    # no row fits, even with the driver's min-reg retry, runs spilled (tiledsl.ops.compile_fmha_fwd),
    # and prebuild names it.
    return Algorithm(c.block_m, c.block_n, c.waves, c.stages, occupancy=c.occupancy, reuse=c.reuse)


@dataclass(frozen=True)
class Variant:
    arch: str
    signature: Signature

    def key(self) -> str:
        return f"{self.arch}/{self.signature.name()}"

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key(), "arch": self.arch, "signature": asdict(self.signature),
                "algorithm": asdict(algorithm(self.arch, self.signature))}

    def build(self) -> list[Any]:
        """Compile (or load from the compile cache) every kernel a call of this signature may
        launch on this arch; returns the CompiledKernels."""
        validate(self.arch, self.signature)
        return _BUILDERS[self.signature.family](self.arch, self.signature)


def _mask_params(sig: Signature):
    from tiledsl.prebuild import MASKS as PARAMS  # the mask each name stands for (any window will do)

    return PARAMS[sig.mask]


def _split_shape(arch: str, sig: Signature, **kw: Any):
    from tiledsl.fmha_splitkv import SplitShape

    # A bias tensor's rows are padded to 16-byte multiples by the ops (tiledsl.ops.check_bias).
    aligned = ("bias", "k", "o", "q", "v") if sig.bias == "tensor" else ("k", "o", "q", "v")
    base = SplitShape(arch=arch, dtype=sig.dtype, hdim_q=sig.hdim_q, hdim_v=sig.hdim_v, mask=_mask_params(sig),
                      varlen=sig.mode == "group", lse=sig.lse, sink=sig.sink, softcap=sig.softcap, contiguous=True,
                      aligned=aligned, num_splits=1, b=1, hq=2, sq=64, bias=sig.bias, dropout=sig.dropout)
    return replace(base, **kw)


def _bias_dtypes(sig: Signature) -> tuple[str, ...]:
    """The bias tensor dtypes a variant's build covers: q's and f32 (fp8: f32)."""
    return (sig.dtype, "f32") if sig.bias == "tensor" and sig.dtype != FP8 else ("f32",)


def _out_dtypes(sig: Signature) -> tuple[str | None, ...]:
    """The output dtypes a variant's build covers: fp8 writes bf16 or f16, the others their own."""
    return ("bf16", "f16") if sig.dtype == FP8 else (None,)


def _kernels(plan: Any) -> list[Any]:
    return [stage.kernel for stage in plan.stages]


def _build_fwd(arch: str, sig: Signature) -> list[Any]:
    from tiledsl.fmha_splitkv import build_attention_plan, wide_query_blocks

    # One stage, with and without GQA packing (chosen from the call's shapes); with dropout, also
    # the keep-mask stage of return_dropout_mask. Where the variant has a WIDE row, the wider query
    # tile a large grid takes (wide_query_blocks). (The forward pairs query blocks only on request:
    # tiledsl.fmha_splitkv.pair_query_blocks.)
    shapes = [_split_shape(arch, sig, heads_per_block=hpb, bias_dtype=bdt, dropout_mask=mask, out_dtype=out,
                           query_tile=tile)
              for bdt, hpb, mask, out, tile in itertools.product(
                  _bias_dtypes(sig), (1, 2), (False, sig.dropout), _out_dtypes(sig), ("auto", "wide"))]
    kernels = [k for shape in shapes if shape.query_tile == "auto" or wide_query_blocks(shape)
               for k in _kernels(build_attention_plan(shape))]
    return list({id(k): k for k in kernels}.values())


def _build_splitkv(arch: str, sig: Signature) -> list[Any]:
    from tiledsl.fmha_splitkv import build_attention_plan

    # Producers with and without packing; the combine for decode (a row per block) and longer queries.
    return [k for bdt, hpb, sq, out in itertools.product(_bias_dtypes(sig), (1, 2), (1, 64), _out_dtypes(sig))
            for k in _kernels(build_attention_plan(_split_shape(arch, sig, num_splits=2, heads_per_block=hpb, sq=sq,
                                                                bias_dtype=bdt, out_dtype=out)))]


def _build_kvcache(arch: str, sig: Signature) -> list[Any]:
    from tiledsl.fmha_kvcache import KvCacheShape, build_kvcache_plan

    out = []
    pages = (16, 256) if sig.paged else (0,)  # below and above a key block: per-key or per-block lookups
    for page, splits, hpb, sq in itertools.product(pages, (1, 2), (1, 2), (1, 64)):
        att = _split_shape(arch, sig, kv_cache="paged" if sig.paged else "contiguous", page_size=page,
                           num_splits=splits, heads_per_block=hpb, sq=sq,
                           q_name="q_rot" if sig.rotary != "none" else "q")
        shape = KvCacheShape(attention=att, batch=1, hk=1, s_new=1, rotary=sig.rotary,
                             q_positions="rows" if sig.mask != "none" else "first", new_aligned=True)
        out += _kernels(build_kvcache_plan(shape))
    return out


def _build_bwd(arch: str, sig: Signature) -> list[Any]:
    from tiledsl.fmha_bwd import plan_from_sizes

    # A bias tensor: of q's dtype or f32, without dbias, and with it (the dbias stage summing over
    # the batch, the heads, both or neither).
    dbias: list[tuple[str, tuple[int, ...]]] = [("none", ())]
    if sig.bias == "tensor":
        dbias += [("reduce", dims) for dims in ((0,), (1,), (0, 1), ())]
    out = []
    # Under a causal mask also the paired key blocks a large grid takes (tiledsl.pairing).
    pairs = ("auto", "always") if _mask_params(sig).kind in CAUSAL_KINDS else ("auto",)
    for bdt, (mode, dims), pair in itertools.product(_bias_dtypes(sig), dbias, pairs):
        out += _kernels(plan_from_sizes(arch, dtype=sig.dtype, hdim_q=sig.hdim_q, hdim_v=sig.hdim_v, hq=1, hk=1,
                                        seqlens_q=(64,), seqlens_k=(64,), varlen=sig.mode == "group",
                                        mask=_mask_params(sig), softcap=sig.softcap, sink=sig.sink,
                                        deterministic=sig.deterministic, bias=sig.bias, bias_dtype=bdt,
                                        dbias=mode, dbias_sum=dims, dropout=sig.dropout, pair_blocks=pair))
    return list({id(k): k for k in out}.values())


_BUILDERS = {"fmha_fwd": _build_fwd, "fmha_fwd_splitkv": _build_splitkv, "fmha_fwd_kvcache": _build_kvcache,
             "fmha_bwd": _build_bwd}


# -- receipts ------------------------------------------------------------------------------------
def _grid(family: str, **axes: tuple[Any, ...]) -> list[Signature]:
    names = list(axes)
    return [Signature(family, **dict(zip(names, values, strict=True))) for values in itertools.product(*axes.values())]


_COMMON = {"dtype": DTYPES, "hdim_q": (64, 128), "hdim_v": (64, 128)}


def _same_hdims(sigs: list[Signature]) -> list[Signature]:
    return [s for s in sigs if s.hdim_q == s.hdim_v]


def _flash() -> list[Signature]:
    # flash_attn_func / flash_attn_varlen_func: forward (LSE kept for the backward), its split
    # path, and the backward; batch and group mode; no mask or causal.
    axes = {**_COMMON, "mode": MODES, "mask": ("none", "causal")}
    return _same_hdims(_grid("fmha_fwd", **axes, lse=(False, True)) + _grid("fmha_fwd_splitkv", **axes)
                       + _grid("fmha_bwd", **axes) + _grid("fmha_fwd", **axes, lse=(True,), dropout=(True,))
                       + _grid("fmha_bwd", **axes, dropout=(True,)))


def _pytorch() -> list[Signature]:
    # scaled_dot_product_attention: batch mode, is_causal is top-left aligned.
    axes = {**_COMMON, "mode": ("batch",), "mask": ("none", "top_left")}
    return _same_hdims(_grid("fmha_fwd", **axes, lse=(False, True)) + _grid("fmha_bwd", **axes))


def _training() -> list[Signature]:
    axes = {**_COMMON, "mode": MODES, "mask": MASKS, "dropout": (False, True)}
    return _same_hdims(_grid("fmha_fwd", **axes, lse=(True,)) + _grid("fmha_bwd", **axes,
                                                                      deterministic=(False, True)))


def _inference() -> list[Signature]:
    axes = {**_COMMON, "mask": ("none", "causal")}
    return _same_hdims(_grid("fmha_fwd_splitkv", **axes, mode=MODES)
                       + _grid("fmha_fwd_kvcache", **axes, mode=MODES, paged=(False, True),
                               rotary=("none", "half")))


def _fp8() -> list[Signature]:
    axes = {"dtype": (FP8,), "hdim_q": (64, 128), "hdim_v": (64, 128), "mode": MODES, "mask": ("none", "causal")}
    return _same_hdims(_grid("fmha_fwd", **axes, lse=(False, True)) + _grid("fmha_fwd_splitkv", **axes))


def _all() -> list[Signature]:
    axes = {"dtype": DTYPES, "hdim_q": (32, 64, 128, 256), "hdim_v": (32, 64, 128, 256), "mode": MODES,
            "mask": MASKS, "sink": (False, True), "softcap": (False, True)}
    drop = {"bias": BIASES, "dropout": (False, True)}
    sigs = (_grid("fmha_fwd", **axes, lse=(False, True), **drop) + _grid("fmha_fwd_splitkv", **axes, **drop)
            + _grid("fmha_bwd", **axes, deterministic=(False, True), **drop)
            + _grid("fmha_fwd_kvcache", **axes, paged=(False, True), rotary=ROTARY, bias=("none", "alibi")))
    return _same_hdims(sigs)


RECEIPTS: dict[str, tuple[str, Any]] = {
    "flash": ("what flash_attn_func / flash_attn_varlen_func need: forward, split-KV, backward; "
              "f16/bf16, hdim 64/128, no mask or causal, with and without dropout", _flash),
    "pytorch": ("what scaled_dot_product_attention needs: batch mode, no mask or top-left causal, "
                "forward and backward", _pytorch),
    "training": ("forward with LSE and backward (both dQ modes), every mask, batch and group, with and "
                 "without dropout", _training),
    "inference": ("split-KV and KV cache (contiguous and paged, with and without rotary), "
                  "no mask or causal", _inference),
    "fp8": ("fp8 (e4m3) forward and split-KV on the archs with fp8 matrix instructions, bf16 or f16 out, "
            "hdim 64/128, batch and group, no mask or causal", _fp8),
    "all": ("every family, dtype, padded head dim (32-256), mask and feature (bias, ALiBi and dropout included)",
            _all),
}


def receipt_variants(receipt: str, archs: list[str]) -> list[Variant]:
    """The variants of a receipt on these archs (a ValueError for an unknown or empty receipt)."""
    if receipt not in RECEIPTS:
        raise ValueError(f"receipt: expected one of {', '.join(RECEIPTS)}, got {receipt!r}")
    what, make = RECEIPTS[receipt]
    if make is None:
        raise ValueError(f"receipt {receipt}: {what}")
    for arch in archs:
        validate(arch, Signature("fmha_fwd"))
    sigs = make()
    if receipt == "fp8":  # only the archs that have it (an empty result says which do)
        archs = [a for a in archs if get_arch(a).fp8_flavour]
        if not archs:
            raise ValueError("receipt fp8: none of these archs has fp8 matrix instructions (gfx942, gfx950, gfx1201)")
    return [Variant(arch, sig) for arch in archs for sig in sigs]


def arch_specs(arch: str) -> dict[str, Any]:
    """The arch's facts and every family's tile table, as JSON-ready data (CK's fmha_arch_specs)."""
    from tiledsl.fmha_bwd import BWD_CONFIGS, BWD_DBIAS_CONFIGS
    from tiledsl.kernels.fmha_configs import BIASED, CONFIGS, HDIMS, MASKED, WIDE, WIDE_ROUNDS

    validate(arch, Signature("fmha_fwd"))
    a = get_arch(arch)
    facts = {f.name: getattr(a, f.name) for f in fields(a) if f.name not in ("matrix_ops", "timing")}
    facts["matrix_ops"] = [asdict(op) for op in a.matrix_ops]
    facts["timing"] = asdict(a.timing) if a.timing is not None else None  # the timing model's parameters
    fwd = {"tiles": {str(h): asdict(CONFIGS[arch][h]) for h in HDIMS},
           "masked_tiles": {str(h): asdict(c) for h, c in MASKED.get(arch, {}).items()},
           # the wider query tiles of large grids (fmha_splitkv.wide_query_blocks), within these rounds
           "wide_tiles": {str(h): asdict(c) for h, c in WIDE.get(arch, {}).items()},
           "wide_rounds": WIDE_ROUNDS.get(arch),
           "bias_tiles": {kind: {f"{h}{'-masked' if m else ''}": asdict(c) for (h, m), c in rows.get(arch, {}).items()}
                          for kind, rows in BIASED.items()}}
    bwd = {"tiles": {str(h): asdict(c) for h, c in BWD_CONFIGS[arch].items()},
           "dbias_tiles": {str(h): asdict(c) for h, c in BWD_DBIAS_CONFIGS.get(arch, {}).items()}}
    supports = {"dtypes": list(DTYPES), "modes": list(MODES), "masks": list(MASKS), "biases": list(BIASES),
                "max_hdim": MAX_HDIM, "padded_hdims": list(HDIMS), "not_yet": NOT_YET,
                # the fp8 forward (docs/fp8.md): its dtype and families where the arch has fp8 matrix ops
                "fp8": {"dtype": FP8, "flavour": a.fp8_flavour, "families": list(FP8_FAMILIES)} if a.fp8_flavour
                else None}
    return {"arch": arch, "facts": facts, "supports": supports,
            "families": {"fmha_fwd": fwd, "fmha_fwd_splitkv": fwd, "fmha_fwd_kvcache": fwd, "fmha_bwd": bwd}}


# -- the variant a plan's shape belongs to (named in errors when a package lacks a kernel) ----------
MASK_NAMES = {"none": "none", "causal_bottom_right": "causal", "causal_top_left": "top_left", "window": "window"}


def variant_of(shape: Any) -> Variant:
    """The registry variant whose build covers the kernels of a plan built for `shape` (a
    fmha_splitkv.SplitShape, fmha_bwd.BwdShape or fmha_kvcache.KvCacheShape)."""
    from tiledsl.fmha_bwd import BwdShape
    from tiledsl.fmha_kvcache import KvCacheShape

    if isinstance(shape, KvCacheShape):
        a = shape.attention
        return Variant(a.arch, Signature("fmha_fwd_kvcache", dtype=a.dtype, mode="group" if a.varlen else "batch",
                                         hdim_q=a.hdim_q, hdim_v=a.hdim_v, mask=MASK_NAMES[a.mask.kind], lse=a.lse,
                                         sink=a.sink, softcap=a.softcap, paged=a.kv_cache == "paged",
                                         rotary=shape.rotary, bias=a.bias))
    mode = "group" if shape.varlen else "batch"
    if isinstance(shape, BwdShape):
        return Variant(shape.arch, Signature("fmha_bwd", dtype=shape.dtype, mode=mode, hdim_q=shape.hdim_q,
                                             hdim_v=shape.hdim_v, mask=MASK_NAMES[shape.mask.kind], sink=shape.sink,
                                             softcap=shape.softcap, deterministic=shape.deterministic,
                                             bias=shape.bias, dropout=shape.dropout))
    family = "fmha_fwd_splitkv" if shape.num_splits > 1 else "fmha_fwd"
    return Variant(shape.arch, Signature(family, dtype=shape.dtype, mode=mode, hdim_q=shape.hdim_q,
                                         hdim_v=shape.hdim_v, mask=MASK_NAMES[shape.mask.kind], lse=shape.lse,
                                         sink=shape.sink, softcap=shape.softcap, bias=shape.bias,
                                         dropout=shape.dropout))


def parse_variant_key(key: str) -> Variant:
    """'gfx942/fmha_fwd-f16-batch-d128-causal-lse' -> its Variant (the inverse of Variant.key),
    validated; a ValueError saying which part is wrong otherwise."""
    arch, _, name = key.partition("/")
    parts = name.split("-")
    if not name or len(parts) < 5:
        raise ValueError(f"variant {key!r}: expected ARCH/FAMILY-DTYPE-MODE-dHDIM-MASK[-flags], e.g. "
                         "gfx942/fmha_fwd-f16-batch-d128-causal-lse (`tiledsl list` prints them)")
    family, dtype, mode, hd, mask, *flags = parts
    dims = hd[1:].split("x") if hd.startswith("d") else []
    if len(dims) not in (1, 2) or not all(d.isdigit() for d in dims):
        raise ValueError(f"variant {key!r}: head dims {hd!r} should read d128 or d192x128")
    kw: dict[str, Any] = {"dtype": dtype, "mode": mode, "hdim_q": int(dims[0]), "hdim_v": int(dims[-1]),
                          "mask": mask}
    for flag in flags:
        if flag in ("lse", "sink", "softcap", "paged", "deterministic", "dropout"):
            kw[flag] = True
        elif flag.startswith(("rotary_", "bias_")):
            field_name, _, value = flag.partition("_")
            kw[field_name] = value
        else:
            raise ValueError(f"variant {key!r}: unknown flag {flag!r}")
    variant = Variant(arch, Signature(family, **kw))
    validate(arch, variant.signature)
    if variant.key() != key:
        raise ValueError(f"variant {key!r}: not in canonical form; did you mean {variant.key()}?")
    return variant
