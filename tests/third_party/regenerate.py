"""Regenerate the third-party corpus: the Triton kernels of kernels.py compiled by the installed
Triton for every arch of the arch table, as code objects (`<arch>/<case>.hsaco`) with their launch
metadata (`<arch>/<case>.json`). Run it by hand after a Triton upgrade:

    .venv/bin/python tests/third_party/regenerate.py [arch ...]

Compiled the way Triton's JIT specializes a real call on an AMD GPU: `tt.divisibility` 16 on every
pointer and on every integer argument divisible by 16, and `tt.pointer_range` 32 on every pointer
(a tensor under 2 GiB, which lets Triton use buffer instructions) -- so the code is what Triton
runs, not a weaker variant. Shapes are small so that the emulator test stays quick."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import triton
from triton import knobs
from triton.backends.compiler import GPUTarget

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))
import kernels  # noqa: E402

from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch  # noqa: E402

# case -> (kernel, argument values (pointers: their element type), constexprs, options, grid).
# Pointer values are names the test fills with arrays; the test knows each case's problem.
S, H, D = 128, 2, 64  # attention: one batch, two heads, sequence 128, head dim 64
CASES: dict[str, tuple] = {
    "vector_add": (kernels.vector_add, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": 1000},
                   {"BLOCK": 256}, {"num_warps": 4}, (4, 1, 1)),
    "softmax": (kernels.softmax, {"out_ptr": "*fp32", "in_ptr": "*fp32", "in_stride": 128, "out_stride": 128,
                                  "n_rows": 48, "n_cols": 100},
                {"BLOCK": 128, "NUM_STAGES": 2}, {"num_warps": 4}, (8, 1, 1)),
    "layer_norm_fwd": (kernels.layer_norm_fwd, {"X": "*fp16", "Y": "*fp16", "W": "*fp16", "B": "*fp16",
                                                "Mean": "*fp32", "Rstd": "*fp32", "stride": 208, "N": 200,
                                                "eps": 1e-5},
                       {"BLOCK": 128}, {"num_warps": 4}, (32, 1, 1)),
    "layer_norm_bwd_dx": (kernels.layer_norm_bwd_dx, {"DX": "*fp16", "DY": "*fp16", "DW": "*fp16", "DB": "*fp16",
                                                      "X": "*fp16", "W": "*fp16", "Mean": "*fp32", "Rstd": "*fp32",
                                                      "Lock": "*i32", "stride": 208, "N": 200},
                          {"GROUP": 8, "BLOCK": 256}, {"num_warps": 4}, (32, 1, 1)),
    "layer_norm_bwd_dwdb": (kernels.layer_norm_bwd_dwdb, {"DW": "*fp16", "DB": "*fp16", "FINAL_DW": "*fp16",
                                                          "FINAL_DB": "*fp16", "M": 8, "N": 200},
                            {"BLOCK_M": 8, "BLOCK_N": 64}, {"num_warps": 4}, (4, 1, 1)),
    "matmul": (kernels.matmul, {"A": "*fp16", "B": "*fp16", "C": "*fp16", "M": 96, "N": 160, "K": 128,
                                "stride_am": 128, "stride_ak": 1, "stride_bk": 160, "stride_bn": 1,
                                "stride_cm": 160, "stride_cn": 1},
               {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 2}, {"num_warps": 4, "num_stages": 2},
               (2 * 3, 1, 1)),
    "attn_fwd": (kernels.attn_fwd, {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "Out": "*fp16", "M": "*fp32",
                                    "sm_scale": D ** -0.5, "stride_h": S * D, "stride_tok": D, "N_CTX": S},
                 {"BLOCK_M": 64, "BLOCK_N": 32, "HEAD_DIM": D}, {"num_warps": 4, "num_stages": 1},
                 (S // 64, H, 1)),
    "attn_bwd_preprocess": (kernels.attn_bwd_preprocess, {"Out": "*fp16", "DO": "*fp16", "Delta": "*fp32",
                                                          "N_CTX": S},
                            {"BLOCK_M": 64, "HEAD_DIM": D}, {"num_warps": 4}, (S // 64, H, 1)),
    "attn_bwd": (kernels.attn_bwd, {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "sm_scale": D ** -0.5,
                                    "DO": "*fp16", "DQ": "*fp16", "DK": "*fp16", "DV": "*fp16", "M": "*fp32",
                                    "D": "*fp32", "stride_h": S * D, "stride_tok": D, "N_CTX": S},
                 {"BLOCK_M": 32, "BLOCK_N": 64, "HEAD_DIM": D}, {"num_warps": 4, "num_stages": 1},
                 (S // 64, H, 1)),
    "math_f32": (kernels.math_f32, {"X": "*fp32", "Y": "*fp32", "Out": "*fp32", "n": 1000}, {"BLOCK": 256},
                 {"num_warps": 4}, (4, 1, 1)),
    "int_ops": (kernels.int_ops, {"A": "*i32", "B": "*i32", "Out": "*i32", "Wide": "*i64", "n": 1000},
                {"BLOCK": 256}, {"num_warps": 4}, (4, 1, 1)),
    "conversions": (kernels.conversions, {"X": "*fp32", "F16Out": "*fp16", "BF16Out": "*bf16", "IntOut": "*i32",
                                          "F32Out": "*fp32", "n": 1000}, {"BLOCK": 256}, {"num_warps": 4},
                    (4, 1, 1)),
    "scan_sort": (kernels.scan_sort, {"X": "*fp32", "Ints": "*i32", "CumF": "*fp32", "CumI": "*i32",
                                      "Sorted": "*fp32", "ArgMax": "*i32", "ArgMin": "*i32"},
                  {"N": 128}, {"num_warps": 2}, (8, 1, 1)),
    "atomics": (kernels.atomics, {"Keys": "*i32", "Vals": "*i32", "Hist": "*i32", "Sums": "*fp32", "Maxes": "*i32",
                                  "Counter": "*i32", "Olds": "*i32", "n": 1000}, {"BLOCK": 256}, {"num_warps": 4},
                (4, 1, 1)),
    "dot_bf16": (kernels.dot_typed, {"A": "*bf16", "B": "*bf16", "C": "*fp32"},
                 {"M": 32, "N": 32, "K": 64, "PRECISION": "none"}, {"num_warps": 4}, (1, 1, 1)),
    "dot_i8": (kernels.dot_typed, {"A": "*i8", "B": "*i8", "C": "*i32"},
               {"M": 32, "N": 32, "K": 64, "PRECISION": "none"}, {"num_warps": 4}, (1, 1, 1)),
    "dot_f32": (kernels.dot_typed, {"A": "*fp32", "B": "*fp32", "C": "*fp32"},
                {"M": 32, "N": 32, "K": 64, "PRECISION": "ieee"}, {"num_warps": 4}, (1, 1, 1)),
    "rand": (kernels.rand, {"Ints": "*i32", "Floats": "*fp32", "seed": 20261201, "n": 1000}, {"BLOCK": 256},
             {"num_warps": 4}, (4, 1, 1)),
    "math_special": (kernels.math_special, {"X": "*fp32", "Y": "*fp32", "Out": "*fp32", "n": 1000},
                     {"BLOCK": 256}, {"num_warps": 4, "enable_fp_fusion": False}, (4, 1, 1)),
    "dot_f16_acc": (kernels.dot_f16_acc, {"A": "*fp16", "B": "*fp16", "C": "*fp16"}, {"M": 32, "N": 32, "K": 64},
                    {"num_warps": 4}, (1, 1, 1)),
    "reshape_ops": (kernels.reshape_ops, {"X": "*fp32", "Idx": "*i32", "Out": "*fp32"}, {"R": 32, "C": 64},
                    {"num_warps": 4}, (1, 1, 1)),
    "fp8_casts": (kernels.fp8_casts, {"X": "*fp32", "Q8": "*u8", "Back": "*fp32", "n": 1000},
                  {"F8": "fp8e4nv", "BLOCK": 256}, {"num_warps": 4}, (4, 1, 1)),
    # The MX-scaled dot runs only as its gfx950 variants (VARIANTS: main() skips cases listed there).
    "dot_scaled": (kernels.dot_scaled, {"A": "*u8", "AS": "*u8", "B": "*u8", "BS": "*u8", "C": "*fp32"},
                   {"M": 32, "N": 32, "K": 128, "FA": "e2m1", "FB": "e2m1"}, {"num_warps": 4}, (1, 1, 1)),
    "math_f64": (kernels.math_f64, {"X": "*fp64", "Y": "*fp64", "Out": "*fp64", "n": 500}, {"BLOCK": 128},
                 # Without fusion: Triton's default contracts ocml's double-double steps into fmas that
                 # count a product's low part twice (sin is wrong past 2^31, pow off by ulps: the
                 # emulator matched glibc only with fusion off, on every arch).
                 {"num_warps": 2, "enable_fp_fusion": False}, (4, 1, 1)),
    "math_16bit": (kernels.math_16bit, {"H": "*fp16", "B": "*bf16", "HOut": "*fp16", "BOut": "*bf16", "n": 1000},
                   {"BLOCK": 256}, {"num_warps": 4}, (4, 1, 1)),
    "atomics_more": (kernels.atomics_more, {"Flags": "*i32", "Swapped": "*i32", "Winners": "*i32",
                                            "HalfSums": "*fp16", "Order": "*i64", "n": 1024},
                     {"BLOCK": 256}, {"num_warps": 4}, (4, 1, 1)),
    "scan_custom": (kernels.scan_custom, {"X": "*fp32", "Out": "*fp32", "Hist": "*i32"}, {"N": 128, "BINS": 16},
                    {"num_warps": 2}, (8, 1, 1)),
    "gather_wide": (kernels.gather_wide, {"Src": "*fp32", "Idx": "*i32", "Out": "*fp32", "stride": 1048583,
                                          "n": 1000}, {"BLOCK": 256}, {"num_warps": 4}, (4, 1, 1)),
}


# Variants of a case, only on the archs where they compile to something the others do not test:
# variant -> (case, archs, async copy, pointer range, element types replacing the case's[,
# constexprs replacing the case's]).
# - Triton's asynchronous copies (TRITON_HIP_USE_ASYNC_COPY=1, the default on gfx950; Triton has
#   them on gfx942 and gfx950): loads straight into LDS, through buffer instructions or -- for a
#   tensor past 2 GiB, which gets no `tt.pointer_range` -- through global ones.
# - An fp8 (OCP e4m3) matmul on gfx950, whose B operand goes through ds_read_b64_tr_b8.
# - f32 dots as TF32 (gfx942's xf32 MFMA, the only arch with one), fp8 dots in each arch's own fp8
#   (gfx942: FNUZ e4m3; gfx1201: OCP e4m3 into WMMA).
VARIANTS = {"matmul_async_buffer": ("matmul", ("gfx942", "gfx950"), True, True, {}),
            "matmul_async_global": ("matmul", ("gfx942", "gfx950"), True, False, {}),
            "matmul_fp8": ("matmul", ("gfx950",), None, True, {"A": "*fp8e4nv", "B": "*fp8e4nv"}),
            "dot_tf32": ("dot_f32", ("gfx942",), None, True, {}, {"PRECISION": "tf32"}),
            "dot_scaled_fp4": ("dot_scaled", ("gfx950",), None, True, {}, {}),
            # fp8 casts in each arch's own formats (OCP on gfx950/gfx1201, FNUZ on gfx942)
            "fp8_casts_e4m3": ("fp8_casts", ("gfx950", "gfx1201"), None, True, {}, {"F8": "fp8e4nv"}),
            "fp8_casts_e5m2": ("fp8_casts", ("gfx950", "gfx1201"), None, True, {}, {"F8": "fp8e5"}),
            "fp8_casts_fnuz": ("fp8_casts", ("gfx942",), None, True, {}, {"F8": "fp8e4b8"}),
            "fp8_casts_bf8_fnuz": ("fp8_casts", ("gfx942",), None, True, {}, {"F8": "fp8e5b16"}),
            "dot_scaled_fp8_fp4": ("dot_scaled", ("gfx950",), None, True, {}, {"M": 16, "N": 16, "K": 256,
                                                                             "FA": "e4m3", "FB": "e2m1"}),
            "dot_scaled_bf8": ("dot_scaled", ("gfx950",), None, True, {}, {"FA": "e5m2", "FB": "e5m2"}),
            "dot_fp8_fnuz": ("dot_f32", ("gfx942",), None, True, {"A": "*fp8e4b8", "B": "*fp8e4b8"},
                             {"PRECISION": "none"}),
            "dot_fp8": ("dot_f32", ("gfx1201",), None, True, {"A": "*fp8e4nv", "B": "*fp8e4nv"},
                        {"PRECISION": "none"})}


# Cases compiled only as variants (their kernels exist on one arch).
VARIANT_ONLY = ("dot_scaled", "fp8_casts")


def _signature(values: dict) -> dict[str, str]:
    sig = {}
    for name, v in values.items():
        sig[name] = v if isinstance(v, str) else "fp32" if isinstance(v, float) else "i32"
    return sig


def compile_case(case: str, arch: str) -> tuple[bytes, dict, str]:
    """(code object, launch metadata, assembly) of one case (or variant) for one arch."""
    base, _archs, async_copy, pointer_range, types, *replaced = VARIANTS.get(case, (case, (), None, True, {}))
    knobs.amd.use_async_copy = async_copy  # None: Triton's default
    fn, values, constexprs, options, grid = CASES[base]
    values = {**values, **types}
    constexprs = {**constexprs, **(replaced[0] if replaced else {})}
    order = fn.arg_names
    sig = _signature(values)
    # Like the JIT: an integer argument equal to 1 becomes a constant (a unit stride).
    constexprs = {**constexprs, **{n: 1 for n, v in values.items() if isinstance(v, int) and v == 1}}
    sig.update({name: "constexpr" for name in constexprs})
    sig = {name: sig[name] for name in order}
    attrs = {}
    for name, v in values.items():
        if isinstance(v, str):  # a pointer: 16-byte aligned, inside a tensor under 2 GiB
            attrs[(order.index(name),)] = [["tt.divisibility", 16]] + [["tt.pointer_range", 32]] * pointer_range
        elif isinstance(v, int) and v != 1 and v % 16 == 0:
            attrs[(order.index(name),)] = [["tt.divisibility", 16]]
    src = triton.compiler.ASTSource(fn=fn, signature=sig, attrs=attrs, constexprs=constexprs)
    a = get_arch(arch)
    k = triton.compile(src, target=GPUTarget("hip", arch, a.wave_size), options=options)
    md = k.metadata._asdict()
    meta = {"case": case, "kernel": k.name, "arch": arch, "triton": triton.__version__,
            "async_copy": bool(async_copy), "pointer_range": pointer_range,
            "args": [name for name in order if name not in constexprs],
            "values": {name: v for name, v in values.items() if not isinstance(v, str)},
            "pointers": {name: v[1:] for name, v in values.items() if isinstance(v, str)},
            "constexprs": constexprs, "options": options, "grid": list(grid),
            "block": [md["num_warps"] * a.wave_size, 1, 1], "shared": int(md["shared"]),
            "global_scratch_size": int(md.get("global_scratch_size") or 0),
            "profile_scratch_size": int(md.get("profile_scratch_size") or 0)}
    return k.asm["hsaco"], meta, k.asm["amdgcn"]


def _llvm_strip() -> str:
    """llvm-strip of the `llvm` wheel the compiler installs, else one on PATH."""
    import shutil

    try:
        import llvm

        wheel = Path(llvm.__file__).parent / "bin" / "llvm-strip"
        if wheel.exists():
            return str(wheel)
    except ImportError:
        pass
    found = shutil.which("llvm-strip-22") or shutil.which("llvm-strip")
    if found is None:
        raise SystemExit("regenerate.py: no llvm-strip (install the compiler: make .venv)")
    return found


def _strip(blob: bytes) -> bytes:
    """Drop the symbol table and debug sections (the loader needs the kernel descriptor symbol
    and the notes, which strip keeps): small binaries for the repository."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "k.hsaco"
        p.write_bytes(blob)
        subprocess.run([_llvm_strip(), "--strip-debug", str(p)], check=True)
        return p.read_bytes()


def main() -> None:
    archs = sys.argv[1:] or list(ARCH_NAMES)
    for arch in archs:
        out = HERE / arch
        out.mkdir(exist_ok=True)
        for case in [*(c for c in CASES if c not in VARIANT_ONLY),
                     *(v for v, spec in VARIANTS.items() if arch in spec[1])]:
            blob, meta, _asm = compile_case(case, arch)
            blob = _strip(blob)
            (out / f"{case}.hsaco").write_bytes(blob)
            (out / f"{case}.json").write_text(json.dumps(meta, indent=1) + "\n")
            print(f"{arch} {case}: {len(blob)} bytes, LDS {meta['shared']}")


if __name__ == "__main__":
    main()
