"""Ahead-of-time builds of the library's kernels (`tiledsl prebuild`).

`tiledsl.ops.fmha_fwd` compiles the variant a call needs on first use, through the compile cache.
Prebuilding compiles a chosen set of variants into a cache directory now, so that the calls that
need them load them instead (no compile at run time): on this machine, or on another one with
the same tiledsl version when the directory is copied there and `TILEDSL_CACHE_DIR` points at it.
The variants are the ones `fmha_fwd` picks for contiguous inputs (bshd or bhsd) whose strides are
multiples of 16 bytes; other strides compile their own variant on first use.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tiledsl.errors import TileError
from tiledsl.kernels.fmha_configs import HDIMS
from tiledsl.package import PackagedKernel, write_package
from tiledsl.reference import MaskParams, fmha_mask_params

# --mask names and the mask each stands for (window sizes are run-time values: any will do).
MASKS: dict[str, MaskParams] = {
    "none": fmha_mask_params(False),
    "causal": fmha_mask_params(True),  # bottom-right aligned: flash-attention's causal=True
    "top_left": fmha_mask_params("top_left"),
    "window": fmha_mask_params(False, (1, 1)),
}


FEATURES = ("lse", "varlen", "sink", "softcap")  # compile-time switches of fmha_fwd (--with)


@dataclass(frozen=True)
class FmhaVariant:
    arch: str
    dtype: str
    hdim_q: int
    hdim_v: int
    mask: str  # a key of MASKS
    features: frozenset[str]  # of FEATURES

    def describe(self) -> str:
        hd = f"{self.hdim_q}" if self.hdim_q == self.hdim_v else f"{self.hdim_q}/{self.hdim_v}"
        extras = "".join(f" +{f}" for f in FEATURES if f in self.features)
        return f"fmha_fwd {self.arch} {self.dtype} hdim {hd} mask {self.mask}{extras}"

    def registry_variant(self) -> Any:
        """The same variant as a registry key (what `Variant.build` compiles)."""
        from tiledsl.registry import Signature, Variant

        f = self.features
        return Variant(self.arch, Signature("fmha_fwd", dtype=self.dtype, mode="group" if "varlen" in f else "batch",
                                            hdim_q=self.hdim_q, hdim_v=self.hdim_v, mask=self.mask, lse="lse" in f,
                                            sink="sink" in f, softcap="softcap" in f))


def parse_hdim(text: str) -> tuple[int, int]:
    """'128' -> (128, 128); '192/128' -> (192, 128) (q/k head dim / v head dim)."""
    try:
        dims = [int(p) for p in text.split("/")]
    except ValueError:
        dims = []
    if len(dims) not in (1, 2) or not all(1 <= d <= HDIMS[-1] for d in dims):
        raise TileError(f"--hdim {text!r}: expected a head dim 1..{HDIMS[-1]} or QK/V such as 192/128")
    return dims[0], dims[-1]


def fmha_variants(archs: Sequence[str], dtypes: Sequence[str], hdims: Sequence[str], masks: Sequence[str],
                  features: Sequence[str] = ()) -> list[FmhaVariant]:
    """Every combination; each of `features` doubles it (the variants with and without it)."""
    for name, given, allowed in (("--mask", masks, tuple(MASKS)), ("--dtype", dtypes, ("f16", "bf16")),
                                 ("--with", features, FEATURES)):
        for x in given:
            if x not in allowed:
                raise TileError(f"{name} {x!r}: expected one of {', '.join(allowed)}")
    dims = [parse_hdim(h) for h in hdims]
    subsets = [frozenset(c) for n in range(len(set(features)) + 1) for c in itertools.combinations(
        sorted(set(features)), n)]
    return [FmhaVariant(a, dt, dq, dv, m, f)
            for a, dt, (dq, dv), m, f in itertools.product(archs, dtypes, dims, masks, subsets)]


def prebuild_fmha_fwd(variants: Sequence[FmhaVariant],
                      on_result: Callable[[FmhaVariant, BuildResult], None] | None = None) -> list[BuildResult]:
    """Compile each variant into the compile cache (`$TILEDSL_CACHE_DIR`, set by the caller; a
    variant already there is loaded, not compiled) through the registry's builder, which also
    builds the shape-driven alternatives (GQA packing). A variant that fails is a result with its
    error (build_variant), and the others still build."""
    results = []
    for v in variants:
        results.append(build_variant(v.registry_variant()))
        if on_result is not None:
            on_result(v, results[-1])
    return results


# -- receipts (tiledsl.registry) ------------------------------------------------------------------
@dataclass(frozen=True)
class BuildResult:
    key: str
    seconds: float
    kernels: int = 0
    compiled: int = 0  # kernels compiled now (the rest came from the cache)
    error: str | None = None
    packaged: tuple[PackagedKernel, ...] = ()  # the kernels themselves, when building a package
    # The kernels that spill VGPRs to scratch memory (slower; a feature mix no tile row fits in
    # registers), as "name (N VGPRs)".
    spilling: tuple[str, ...] = ()

    def spill_text(self) -> str:
        return f"spills registers to scratch memory: {', '.join(self.spilling)}" if self.spilling else ""


def build_variant(variant: Any, package: bool = False) -> BuildResult:
    """Build one registry Variant; a failure is a result (with its message), not an exception.
    package=True: the result carries the kernels (code objects, manifests, package keys)."""
    from tiledsl.library import clear_plan_caches

    # Plans cached in this process (a forked worker inherits its parent's) hold kernels loaded
    # from wherever they came from then: build anew so every kernel lands in this cache/package.
    clear_plan_caches()
    start = time.perf_counter()
    try:
        kernels = variant.build()
    except (TileError, ValueError) as exc:
        return BuildResult(variant.key(), time.perf_counter() - start, error=str(exc).splitlines()[0])
    except Exception as exc:  # an internal error in one variant must not stop the others
        first = str(exc).splitlines()[0] if str(exc) else ""
        return BuildResult(variant.key(), time.perf_counter() - start,
                           error=f"internal error: {type(exc).__name__}: {first}")
    unique = list({k.key or id(k): k for k in kernels}.values())
    packaged = tuple(PackagedKernel.of(k) for k in unique) if package else ()
    spilling = tuple(f"{k.name} ({k.manifest['vgpr_spill_count']} VGPRs)" for k in unique
                     if k.manifest.get("vgpr_spill_count"))
    return BuildResult(variant.key(), time.perf_counter() - start, len(unique),
                       sum(not k.from_cache for k in unique), packaged=packaged, spilling=spilling)


def prebuild_variants(variants: Sequence[Any], jobs: int, progress: bool = True,
                      package: str | os.PathLike[str] | None = None, receipt: str | None = None) -> list[BuildResult]:
    """Build every variant, `jobs` at a time in worker processes, with a progress bar (count and
    ETA) on stderr; keeps going past failures. Results in the variants' order. `package`: also
    write the variants that built into the kernel package at that directory (index last)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm import tqdm

    results: dict[str, BuildResult] = {}
    with tqdm(total=len(variants), unit="variant", disable=not progress, dynamic_ncols=True) as bar:
        def done(r: BuildResult) -> None:
            results[r.key] = r
            bar.set_postfix_str(("FAILED " if r.error else "") + r.key, refresh=False)
            bar.update(1)

        if jobs <= 1:
            for v in variants:
                done(build_variant(v, package is not None))
        else:
            # Spawned, not forked: a fork copies locks other threads hold (a progress bar's monitor, a
            # caller's threads) and the worker can hang on one before it starts.
            with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
                for fut in as_completed([pool.submit(build_variant, v, package is not None) for v in variants]):
                    done(fut.result())
    ordered = [results[v.key()] for v in variants]
    if package is not None:
        built = [(v, r) for v, r in zip(variants, ordered, strict=True) if not r.error]
        kernels = {k.key: k for _, r in built for k in r.packaged}
        write_package(package, kernels.values(), {
            v.key(): {"signature": asdict(v.signature), "kernels": [k.key for k in r.packaged]} for v, r in built},
            receipt=receipt)
    return ordered
