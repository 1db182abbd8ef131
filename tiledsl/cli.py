"""The `tiledsl` command: compile, inspect, doctor.

Exit status: 0 success; 2 a user error (any TileError, or bad usage) with its message on stderr
and no traceback; 1 an internal compiler error, with the traceback saved to a file whose path is
printed. The environment (TILEDSL_CACHE_DIR) is read here, once, and passed down.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tiledsl import __version__, profile
from tiledsl.backends.rocm.arch import ARCH_NAMES, get_arch
from tiledsl.errors import SourceError, TileError
from tiledsl.options import SCHEDULES

EXIT_OK, EXIT_ICE, EXIT_USER = 0, 1, 2


def _parse_archs(values: Sequence[str]) -> list[str]:
    archs: list[str] = []
    for value in values:
        for name in filter(None, (v.strip() for v in value.split(","))):
            names = list(ARCH_NAMES) if name == "all" else [get_arch(name).name]
            archs.extend(n for n in names if n not in archs)
    if not archs:
        raise TileError(f"no arch given: expected one of {', '.join(ARCH_NAMES)} or all")
    return archs


def _parse_defines(values: Sequence[str], arch: str | None = None) -> dict[str, str]:
    """-D NAME=VALUE for every arch, and -D ARCH:NAME=VALUE for one (it wins over the former);
    `arch` None: the shared ones only, with every arch prefix checked."""
    defines: dict[str, str] = {}
    for specific in (False, True):
        seen: dict[tuple[str, str], str] = {}  # (arch or "", name) -> value: every arch's conflicts are errors
        for item in values:
            target, colon, rest = item.partition(":") if ":" in item.partition("=")[0] else ("", "", item)
            if colon and target not in ARCH_NAMES:
                raise TileError(f"bad -D '{item}': '{target}' is not an arch ({', '.join(ARCH_NAMES)})")
            name, eq, value = rest.partition("=")
            name, value = name.strip(), value.strip()
            if not eq or not name.isidentifier() or not value:
                raise TileError(f"bad -D '{item}': expected NAME=VALUE or ARCH:NAME=VALUE, e.g. -D BLOCK_M=128 "
                                "or -D gfx1100:BLOCK_M=64")
            if bool(colon) != specific:
                continue
            if seen.get((target, name), value) != value:
                raise TileError(f"-D {target + ':' if colon else ''}{name} given twice with different values "
                                f"({seen[target, name]}, {value})")
            seen[target, name] = value
            if not colon or target == arch:
                defines[name] = value
    return defines


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tiledsl", description="tile language compiler for AMD GPUs (CDNA and RDNA)")
    p.add_argument("--version", action="version", version=f"tiledsl {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("compile", help="compile a .tile file (or an intermediate) to code objects")
    c.add_argument("file", help=".tile source, or .tile.mlir / .gpu.mlir / .rocdl.mlir / .ll")
    c.add_argument("--arch", action="append", required=True, metavar="ARCH",
                   help=f"target: {', '.join(ARCH_NAMES)} or all; repeat or comma-separate for several")
    c.add_argument("-D", dest="defines", action="append", default=[], metavar="[ARCH:]NAME=VALUE",
                   help="bind a constexpr parameter (repeatable); ARCH: for one arch only, e.g. -D gfx1100:BLOCK_M=64")
    c.add_argument("-o", "--outdir", required=True, help="output directory")
    c.add_argument("--dump-ir", metavar="DIR", help="write every stage's artifact to DIR")
    c.add_argument("--no-cache", action="store_true", help="neither read nor write the compile cache")
    c.add_argument("--strided", action="store_true",
                   help="accept any stride on every tensor dim (default: the last dim is contiguous, which "
                        "allows vector memory access)")
    c.add_argument("--overlapping-rows", action="store_true",
                   help="accept tensors whose rows overlap (stride 0 over a broadcast dim): row masks stay per lane "
                        "instead of bounding buffer descriptors (docs/compiler.md)")
    c.add_argument("--allow-spills", action="store_true",
                   help="accept a kernel that spills registers to scratch memory (normally an error)")
    c.add_argument("--schedule", choices=["default", *filter(None, SCHEDULES)], default="default",
                   metavar="STRATEGY", help="LLVM's machine scheduler for the kernel: default, "
                   + ", ".join(filter(None, SCHEDULES)) + " (docs/compiler.md)")
    c.add_argument("--interleave", action="store_true",
                   help="ask LLVM's scheduler to place LDS accesses and matrix instructions in turn in the "
                        "block of each loop's first dot (its IGroupLP small-GEMM strategy; docs/compiler.md)")
    c.add_argument("--loop-arena", action="store_true",
                   help="give each LDS staging of a loop bytes of its own where that costs no workgroup per "
                        "compute unit, so fewer need a barrier before their store (docs/compiler.md)")
    c.add_argument("--tree-sums", action="store_true",
                   help="sum each lane's f32 values as a tree of adds rather than a chain, whose independent adds "
                        "RDNA pairs in dual-issue instructions (docs/compiler.md)")
    c.add_argument("--merge-stores", action="store_true",
                   help="store a loop's LDS stagings whose tiles are at hand at its first staging together with "
                        "it, behind one barrier (docs/compiler.md)")
    c.add_argument("--skip-unit-scales", action="store_true",
                   help="multiply a loop-carried tile by a broadcast factor only in the waves where some factor "
                        "is not exactly 1 (a lazy softmax's rescale; docs/compiler.md)")
    c.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")

    i = sub.add_parser("inspect", help="table of registers, LDS, spills, MFMA/WMMA of compiled kernels")
    i.add_argument("outdir", help="a directory written by `tiledsl compile`")
    i.add_argument("--json", action="store_true", help="print JSON instead of a table")

    sub.add_parser("doctor", help="check the toolchain: versions, and a real compile for every arch")

    b = sub.add_parser("prebuild", help="compile library kernel variants ahead of time, into a kernel package (-o) "
                       "or the compile cache")
    b.add_argument("kernel", nargs="?", choices=["fmha_fwd"],
                   help="one family chosen by --dtype/--hdim/--mask/--with (or use --receipt or --variant)")
    b.add_argument("--receipt", help="a named set of variants over every family: " + ", ".join(_receipt_names()))
    b.add_argument("--variant", action="append", metavar="KEY",
                   help="one variant by its key, e.g. gfx942/fmha_fwd-f16-batch-d128-causal-lse (repeatable; "
                        "`tiledsl list` prints keys); --arch is then optional")
    b.add_argument("-o", "--output", metavar="DIR",
                   help="write a self-contained kernel package there (index.json + code objects) for "
                        "TILEDSL_KERNELS=DIR or tiledsl.load_package(DIR); added to if it exists")
    b.add_argument("--arch", action="append", metavar="ARCH",
                   help=f"target: {', '.join(ARCH_NAMES)} or all; repeat or comma-separate for several")
    b.add_argument("--dtype", nargs="+", help="f16 and/or bf16 (default: both)")
    b.add_argument("--hdim", nargs="+", help="head dims, QK/V for unequal ones such as 192/128 (default: 64 128)")
    b.add_argument("--mask", nargs="+", help="none, causal (bottom-right), top_left, window (default: none causal)")
    b.add_argument("--with", dest="features", nargs="+", metavar="FEATURE",
                   help="also build the variants with: lse, varlen, sink, softcap (each doubles the count)")
    b.add_argument("--family", action="append", metavar="FAMILY", help="--receipt: only these families")
    b.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                   help="--receipt: variants compiled at once, in worker processes (default: one per core)")
    b.add_argument("--cache-dir", help="where to put them (default: $TILEDSL_CACHE_DIR, else ~/.cache/tiledsl)")
    b.add_argument("-q", "--quiet", action="store_true", help="print only the summary")

    ls = sub.add_parser("list", help="the kernel variants the library can build (by receipt, arch, family)")
    ls.add_argument("--receipt", help="a named set of variants (default: all, or what --package holds): "
                    + ", ".join(_receipt_names()))
    ls.add_argument("--package", metavar="DIR", help="a kernel package (tiledsl prebuild -o DIR): with --receipt, "
                    "which of its variants DIR holds; alone, everything DIR holds")
    ls.add_argument("--arch", action="append", metavar="ARCH", help="only these archs (default: all)")
    ls.add_argument("--family", action="append", metavar="FAMILY", help="only these families (default: all)")
    ls.add_argument("--json", action="store_true", help="print JSON (keys, signatures, tiles) instead of a table")

    rg = sub.add_parser("registry", help="the per-arch tile tables and constraints as data")
    rg_sub = rg.add_subparsers(dest="registry_command", metavar="ACTION", required=True)
    ex = rg_sub.add_parser("export", help="write one arch's facts, limits and tile tables as JSON")
    ex.add_argument("--arch", required=True, help=f"one of {', '.join(ARCH_NAMES)}")
    ex.add_argument("-o", "--output", help="the JSON file to write (default: standard output)")

    profile.add_parser(sub)

    pl = sub.add_parser("plan", help="print the stages and workspace of a multi-stage library call")
    pl.add_argument("op", choices=["fmha_bwd"], help="the library operation (tiledsl.ops)")
    pl.add_argument("--arch", required=True, help=f"one of {', '.join(ARCH_NAMES)}")
    pl.add_argument("--dtype", default="f16", help="f16 or bf16 (default f16)")
    pl.add_argument("--hdim", default="128", help="head dim, QK/V for unequal ones such as 192/128 (default 128)")
    pl.add_argument("--heads", default="16", help="query heads, Hq/Hk for GQA such as 32/8 (default 16)")
    pl.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    pl.add_argument("--seqlen", default="1024", help="sequence length, SQ/SK when they differ (default 1024)")
    pl.add_argument("--varlen", metavar="SQ[/SK],...",
                    help="group mode: the sequences' lengths, e.g. 100,2000/1800,0 (overrides --batch/--seqlen)")
    pl.add_argument("--mask", default="none", help="none, causal (bottom-right), top_left, or window=LEFT,RIGHT")
    pl.add_argument("--softcap", action="store_true", help="with a logits soft-cap")
    pl.add_argument("--deterministic", action="store_true", help="no atomics (one dq_acc slice per key block)")
    pl.add_argument("--bias", choices=["none", "tensor", "alibi"], default="none",
                    help="an attention bias tensor or ALiBi slopes (docs/bias.md)")
    pl.add_argument("--bias-dtype", choices=["f16", "bf16", "f32"],
                    help="with --bias tensor: the bias tensor's dtype (default f32)")
    pl.add_argument("--dbias", action="store_true", help="with --bias tensor: also its gradient (return_dbias)")
    pl.add_argument("--json", action="store_true",
                    help="print the plan as JSON for the C runtime (stages by package key, workspace layout)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2) and --help/--version (0)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USER
    args.argv = list(argv if argv is not None else sys.argv[1:])  # for internal-error reports
    try:
        if args.command == "compile":
            return cmd_compile(args)
        if args.command == "inspect":
            return cmd_inspect(args)
        if args.command == "prebuild":
            return cmd_prebuild(args)
        if args.command == "plan":
            return cmd_plan(args)
        if args.command == "profile":
            return profile.cmd_profile(args)
        if args.command == "list":
            return cmd_list(args)
        if args.command == "registry":
            return cmd_registry_export(args)
        return cmd_doctor(args)
    except TileError as exc:
        # A SourceError renders as "file:line:col: error: ..." already.
        print(str(exc) if isinstance(exc, SourceError) else f"error: {exc}", file=sys.stderr)
        return EXIT_USER
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        if not _stdout_closed():  # another pipe (a tool's stdin): a failure of ours
            return _internal_error(argv)
        return 0  # the reader (`| head`) has what it wanted
    except Exception:
        return _internal_error(argv)


def _stdout_closed() -> bool:
    """Whether stdout's reader has gone; if so, stdout is pointed at /dev/null so that Python's
    flush at exit does not fail on it again."""
    import select

    try:
        fd = sys.stdout.fileno()
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        closed = any(events & select.POLLERR for _, events in poll.poll(0))  # a pipe without a reader
    except (OSError, ValueError):
        return False
    if closed:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return closed


def _reports_dir() -> Path:
    from tiledsl.cache import default_cache_dir, reports_dir

    return reports_dir(default_cache_dir())


def _internal_error(argv: Sequence[str] | None) -> int:
    print(_report_internal_error(argv), file=sys.stderr)
    return EXIT_ICE


def _report_internal_error(argv: Sequence[str] | None) -> str:
    """Save the exception being handled, with its traceback, under the cache directory's reports
    and return the message that says so."""
    text = (f"tiledsl {__version__} internal compiler error\nargv: {list(argv or sys.argv[1:])}\n"
            f"python {platform.python_version()} on {platform.platform()}\n\n" + traceback.format_exc())
    try:
        reports = _reports_dir()
        reports.mkdir(parents=True, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix="tiledsl-ice-", suffix=".txt", dir=reports)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        where = f"the traceback is saved at {path}"
    except Exception:  # OSError, or a broken environment: never hide the error being reported
        where = "the traceback could not be saved:\n" + text
    exc = sys.exc_info()[1]
    notes = "".join(f"{note}\n" for note in getattr(exc, "__notes__", []))  # e.g. the failing stage
    return (f"internal compiler error: {type(exc).__name__}: {exc}\n{notes}{where}\n"
            "please report it with that file")


# ---------------------------------------------------------------------------------------------
# compile


def cmd_compile(args: argparse.Namespace) -> int:
    from tiledsl.cache import Cache
    from tiledsl.driver import CompiledKernel, compile_file
    from tiledsl.options import CompileOptions

    archs = _parse_archs(args.arch)
    _parse_defines(args.defines)  # every -D checked before anything compiles
    _output_dir(args.outdir, "-o")
    if args.dump_ir:
        _output_dir(args.dump_ir, "--dump-ir")
    cache = None if args.no_cache else Cache.from_env()

    def report(kernel: CompiledKernel, files: list[Path]) -> None:
        if not args.quiet:
            note = " (cached)" if kernel.from_cache else ""
            lowered = kernel.manifest.get("occupancy_lowered_to")
            if lowered is not None:
                note += (f" (occupancy({kernel.manifest['occupancy_target']}) would spill or is out of reach: "
                         f"compiled for {lowered or 'no target'})")
            fallback = kernel.manifest.get("schedule_fallback")
            if fallback:
                asked = [flag for flag, on in (("--schedule", args.schedule != "default"),
                                                ("--interleave", args.interleave)) if on]
                note += f" ({' '.join(asked)}: {fallback})" if asked else f" ({fallback})"
            print(f"{kernel.name} {kernel.arch}: {files[0]}{note}")

    failed: dict[str, str] = {}
    first_arch_with: dict[str, str] = {}  # an error's text -> the first arch that gave it
    internal = False
    for arch in archs:  # one arch failing (e.g. spilling on gfx1100) does not stop the others
        defines = _parse_defines(args.defines, arch)
        options = CompileOptions.make(arch, defines, dump_ir_dir=args.dump_ir, allow_spills=args.allow_spills,
                                      unit_last_stride=not args.strided, failure_dir=str(_reports_dir()),
                                      disjoint_rows=not args.overlapping_rows,
                                      schedule="" if args.schedule == "default" else args.schedule,
                                      interleave=args.interleave, skip_unit_scales=args.skip_unit_scales,
                                      loop_arena=args.loop_arena, merge_stores=args.merge_stores,
                                      tree_sums=args.tree_sums)
        try:
            compile_file(args.file, [arch], defines, args.outdir, options, cache=cache, on_result=report)
        except TileError as exc:
            if len(archs) == 1:
                raise
            text = str(exc) if isinstance(exc, SourceError) else f"error: {exc}"
            # An error that does not depend on the arch (a syntax error) is shown once.
            earlier = first_arch_with.setdefault(text, arch)
            print(text if earlier == arch else f"{arch}: the same error as {earlier}", file=sys.stderr)
            failed[arch] = str(exc).splitlines()[0]
        except Exception:  # a compiler bug on one arch: reported, and the other archs still compile
            if len(archs) == 1:
                raise
            print(f"{arch}: {_report_internal_error(args.argv)}", file=sys.stderr)
            failed[arch] = "internal compiler error"
            internal = True
    if failed:
        by_reason: dict[str, list[str]] = {}
        for arch, why in failed.items():
            by_reason.setdefault(why, []).append(arch)
        print(f"{len(archs) - len(failed)} of {len(archs)} archs compiled; failed: "
              + "; ".join(f"{', '.join(names)} ({why})" for why, names in by_reason.items()), file=sys.stderr)
        return EXIT_ICE if internal else EXIT_USER
    return EXIT_OK


def _output_dir(path: str, flag: str) -> None:
    """Create an output directory up front, so a bad path is a usage error before any compile."""
    from tiledsl.driver import make_dir

    make_dir(path, flag)


def _receipt_names() -> list[str]:
    from tiledsl.registry import RECEIPTS

    return list(RECEIPTS)


def cmd_prebuild(args: argparse.Namespace) -> int:
    from tiledsl.prebuild import BuildResult, FmhaVariant, fmha_variants, prebuild_fmha_fwd

    chosen = [what for what, given in (("a kernel family", args.kernel), ("--receipt", args.receipt),
                                       ("--variant", args.variant)) if given]
    if len(chosen) != 1:
        raise TileError("prebuild: give one of a kernel family (fmha_fwd), --receipt NAME or --variant KEY"
                        + (f", not {' and '.join(chosen)}" if chosen else ""))
    if args.arch is None and not args.variant:
        raise TileError("prebuild: --arch is required (e.g. --arch gfx942,gfx950 or --arch all)")
    if args.jobs < 1:
        raise TileError(f"--jobs: expected at least 1, got {args.jobs}")
    if args.receipt is not None or args.variant or args.output:
        return _prebuild_registry(args)
    variants = fmha_variants(_parse_archs(args.arch), args.dtype or ["f16", "bf16"], args.hdim or ["64", "128"],
                             args.mask or ["none", "causal"], args.features or [])
    root = _use_cache_dir(args.cache_dir)
    done = {True: 0, False: 0}

    def report(v: FmhaVariant, r: BuildResult) -> None:
        if r.error:
            print(f"{v.describe()}: FAILED: {r.error}", file=sys.stderr, flush=True)
            return
        done[r.compiled == 0] += 1
        if not args.quiet:
            print(f"{v.describe()}: {'already cached' if r.compiled == 0 else f'compiled in {r.seconds:.1f} s'}"
                  + (f" ({r.spill_text()})" if r.spilling else ""), flush=True)
        elif r.spilling:
            print(f"{v.describe()}: {r.spill_text()}", file=sys.stderr, flush=True)

    failed = [r for r in prebuild_fmha_fwd(variants, on_result=report) if r.error]
    print(f"{len(variants) - len(failed)} variants in {root} ({done[False]} compiled, {done[True]} already there"
          f"{f'; {len(failed)} failed' if failed else ''}); tiledsl.ops loads them from there when "
          "TILEDSL_CACHE_DIR points at it")
    return EXIT_ICE if failed else EXIT_OK  # as prebuild --receipt: 1 if anything failed


def _use_cache_dir(cache_dir: str | None) -> Path:
    """The compile cache prebuild fills: --cache-dir, else the default. Set here, at the edge, for
    the library's builders (and the worker processes) to read; prebuilding always compiles what
    is missing, whatever TILEDSL_OFFLINE says."""
    from tiledsl.cache import default_cache_dir

    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    _output_dir(str(root), "--cache-dir")  # the cache skips what it cannot write; prebuilding must not
    os.environ["TILEDSL_CACHE_DIR"] = str(root)
    os.environ["TILEDSL_OFFLINE"] = "0"
    return root


def _prebuild_registry(args: argparse.Namespace) -> int:
    """prebuild --receipt / --variant / -o: registry variants, built in worker processes."""
    from tiledsl.prebuild import prebuild_variants
    from tiledsl.registry import parse_variant_key

    given = [f"--{n}" for n in ("dtype", "hdim", "mask", "with") if getattr(args, n if n != "with" else "features")]
    if given and args.kernel is None:
        raise TileError(f"prebuild: {', '.join(given)} select variants of one family (fmha_fwd ...); a receipt "
                        "or a variant key names its own (see `tiledsl list --receipt NAME`)")
    if args.jobs < 1:
        raise TileError(f"--jobs: expected at least 1, got {args.jobs}")
    if args.receipt is not None:
        label, variants = args.receipt, _receipt(args.receipt, args.arch, args.family)
    elif args.variant:
        try:
            variants = [parse_variant_key(k) for k in args.variant]
        except ValueError as exc:
            raise TileError(f"--variant: {exc}") from None
        variants = list(dict.fromkeys(variants))  # a key given twice is built once
        archs = set(_parse_archs(args.arch)) if args.arch else None
        kept = [v for v in variants if archs is None or v.arch in archs]
        if not kept:
            raise TileError(f"prebuild: --arch {' '.join(args.arch)} keeps none of the {len(variants)} --variant "
                            f"keys (their archs: {', '.join(sorted({v.arch for v in variants}))})")
        variants, label = kept, "variants"
    else:
        from tiledsl.prebuild import fmha_variants

        variants = [v.registry_variant() for v in fmha_variants(
            _parse_archs(args.arch), args.dtype or ["f16", "bf16"], args.hdim or ["64", "128"],
            args.mask or ["none", "causal"], args.features or [])]
        label = "fmha_fwd"
    root = _use_cache_dir(args.cache_dir)
    if args.output:
        from tiledsl.package import check_package_dir

        _output_dir(args.output, "-o")
        check_package_dir(Path(args.output))  # before the compiles, which take minutes
    start = time.perf_counter()
    try:
        results = prebuild_variants(variants, args.jobs, progress=not args.quiet, package=args.output,
                                    receipt=args.receipt)
    except OSError as exc:
        raise TileError(f"-o {args.output}: cannot write the package: {exc.strerror or exc}") from None
    failed = [r for r in results if r.error]
    rows = [{"built": label, "variants": len(results), "kernels": sum(r.kernels for r in results),
             "compiled": sum(r.compiled for r in results), "failed": len(failed),
             "seconds": f"{time.perf_counter() - start:.0f}"}]
    print(format_table(rows, [(k, k) for k in rows[0]], text_columns=1))
    for r in results:
        if r.spilling:
            print(f"{r.key}: {r.spill_text()}", file=sys.stderr)
    for r in failed:
        print(f"FAILED {r.key}: {r.error}", file=sys.stderr)
    if args.output:
        print(f"kernel package {args.output}: use it with TILEDSL_KERNELS={args.output} or "
              f"tiledsl.load_package({args.output!r}) (add TILEDSL_OFFLINE=1 to never compile)")
    else:
        print(f"kernels in {root}; tiledsl.ops loads them from there when TILEDSL_CACHE_DIR points at it")
    return EXIT_ICE if failed else EXIT_OK


def _receipt(receipt: str, archs: Sequence[str], families: Sequence[str] | None) -> list[Any]:
    """A receipt's registry variants on these archs, of these families (default: all)."""
    from tiledsl.registry import FAMILIES, receipt_variants

    for f in families or ():
        if f not in FAMILIES:
            raise TileError(f"--family {f!r}: expected one of {', '.join(FAMILIES)}")
    try:
        variants = receipt_variants(receipt, _parse_archs(archs))
    except ValueError as exc:
        raise TileError(str(exc)) from None
    return [v for v in variants if families is None or v.signature.family in families]


def cmd_list(args: argparse.Namespace) -> int:
    from tiledsl.package import Package

    package = Package(args.package) if args.package else None
    if package is not None and args.receipt is None:
        return _list_package(package, args)
    receipt = args.receipt or "all"
    chosen = [v.to_json() for v in _receipt(receipt, args.arch or ["all"], args.family)]
    if package is not None:
        for v in chosen:
            v["in_package"] = v["key"] in package.variants
    if args.json:
        print(json.dumps(chosen, indent=1))
        return EXIT_OK
    cols = ["key", "block_m", "block_n", "waves", "stages", "spills"] + (["in_package"] if package else [])
    rows = [{"key": v["key"], **{k: v["algorithm"][k] for k in ("block_m", "block_n", "waves", "stages")},
             "spills": "yes" if v["algorithm"]["spills"] else "",
             "in_package": "yes" if v.get("in_package") else "no"} for v in chosen]
    print(format_table(rows, [(k, k) for k in cols], text_columns=1))
    held = f", {sum(v['in_package'] for v in chosen)} of them in {package.root}" if package else ""
    print(f"{len(rows)} variants ({receipt}){held}; build them with `tiledsl prebuild --receipt {receipt} "
          "--arch ... [-o DIR]`")
    return EXIT_OK


def _list_package(package: Any, args: argparse.Namespace) -> int:
    """Every variant a kernel package holds (optionally of some archs and families)."""
    from tiledsl.registry import FAMILIES

    archs = set(_parse_archs(args.arch)) if args.arch else None
    for f in args.family or ():
        if f not in FAMILIES:
            raise TileError(f"--family {f!r}: expected one of {', '.join(FAMILIES)}")
    rows = []
    for key, v in sorted(package.variants.items()):
        arch = key.partition("/")[0]
        if (archs is None or arch in archs) and (not args.family or v["signature"]["family"] in args.family):
            kernels = [package.kernels[k] for k in v["kernels"]]
            rows.append({"key": key, "kernels": len(kernels), "bytes": sum(k.get("bytes", 0) for k in kernels)})
    if args.json:
        print(json.dumps(rows, indent=1))
        return EXIT_OK
    print(format_table(rows, [(k, k) for k in ("key", "kernels", "bytes")], text_columns=1))
    index = package.index
    print(f"{len(rows)} variants in {package.root} (tiledsl {index.get('tiledsl')}, receipts "
          f"{', '.join(index.get('receipts', [])) or 'none'}, {len(package.kernels)} kernels)")
    return EXIT_OK


def cmd_registry_export(args: argparse.Namespace) -> int:
    from tiledsl.registry import arch_specs

    try:
        text = json.dumps(arch_specs(args.arch), indent=1) + "\n"
    except ValueError as exc:
        raise TileError(str(exc)) from None
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as exc:
            raise TileError(f"-o {args.output}: cannot write: {exc.strerror}") from None
    else:
        sys.stdout.write(text)
    return EXIT_OK


MAX_BATCH = 65535  # sequences are a grid dimension (y or z), which HIP launches up to 65535 of


def check_batch(batch: int) -> None:
    """`--batch` of `plan` and `profile`."""
    if not 1 <= batch <= MAX_BATCH:
        raise TileError(f"--batch: expected 1..{MAX_BATCH} (sequences are a grid dimension), got {batch}")


def check_heads_and_hdim(hq: int, hk: int, *hdims: int) -> None:
    """`--heads` and `--hdim` of `plan` and `profile`, named as the flags (the library's own errors
    name its arguments, q and k, which the command line does not have)."""
    from tiledsl.kernels.fmha_configs import HDIMS

    if hk < 1 or hq % hk:
        raise TileError(f"--heads {hq}/{hk}: the query heads must be a positive multiple of the key/value heads")
    for d in hdims:
        if not 1 <= d <= HDIMS[-1]:
            raise TileError(f"--hdim: expected 1..{HDIMS[-1]} per head dim, got {d}")


def _pair(text: str, what: str) -> tuple[int, int]:
    """"A" or "A/B" as two non-negative ints (A, A) or (A, B)."""
    parts = text.split("/")
    try:
        values = [int(x) for x in parts]
    except ValueError:
        values = []
    if len(parts) not in (1, 2) or len(values) != len(parts) or min(values) < 0:
        raise TileError(f"{what}: expected N or N/M (non-negative integers), got '{text}'")
    return values[0], values[-1]


def cmd_plan(args: argparse.Namespace) -> int:
    from tiledsl.fmha_bwd import plan_from_sizes
    from tiledsl.reference import fmha_mask_params

    hdim_q, hdim_v = _pair(args.hdim, "--hdim")
    hq, hk = _pair(args.heads, "--heads")
    check_heads_and_hdim(hq, hk, hdim_q, hdim_v)
    if args.varlen is not None:
        pairs = [_pair(x, "--varlen") for x in args.varlen.split(",")]
        if len(pairs) > MAX_BATCH:
            raise TileError(f"--varlen: at most {MAX_BATCH} sequences (a grid row each), got {len(pairs)}")
        seqlens_q, seqlens_k = tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
    else:
        check_batch(args.batch)
        sq, sk = _pair(args.seqlen, "--seqlen")
        seqlens_q, seqlens_k = (sq,) * args.batch, (sk,) * args.batch
    if args.dbias and args.bias != "tensor":
        raise TileError("--dbias: the gradient of a bias tensor; add --bias tensor")
    if args.bias_dtype is not None and args.bias != "tensor":
        raise TileError(f"--bias-dtype: the dtype of a bias tensor; add --bias tensor (got --bias {args.bias})")
    mask_arg = args.mask
    window = (-1, -1)
    causal: Any = {"none": False, "causal": True, "top_left": "top_left"}.get(mask_arg)
    if mask_arg.startswith("window="):
        try:
            causal, window = False, _pair(mask_arg[len("window="):].replace(",", "/"), "--mask window")
            if max(window) >= 2**31:  # the kernels take them as i32
                raise TileError("out of i32")
        except TileError:
            raise TileError(f"--mask: expected window=LEFT,RIGHT (non-negative integers below 2^31), got "
                            f"'{mask_arg}'") from None
    elif causal is None:
        raise TileError(f"--mask: expected none, causal, top_left or window=LEFT,RIGHT, got '{mask_arg}'")
    try:
        plan = plan_from_sizes(get_arch(args.arch).name, dtype=args.dtype, hdim_q=hdim_q, hdim_v=hdim_v, hq=hq,
                               hk=hk, seqlens_q=seqlens_q, seqlens_k=seqlens_k, varlen=bool(args.varlen),
                               mask=fmha_mask_params(causal, window), softcap=args.softcap,
                               deterministic=args.deterministic, bias=args.bias, bias_dtype=args.bias_dtype or "f32",
                               dbias="reduce" if args.dbias else "none")
        text = json.dumps(plan.to_json(), indent=1) if args.json else plan.describe()
    except ValueError as exc:
        raise TileError(str(exc)) from None
    print(text)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# inspect

_COLUMNS = (("kernel", "kernel"), ("arch", "arch"), ("MFMA/WMMA", "matrix_ops"), ("instrs", "instructions"),
            ("VGPR", "vgprs"), ("AGPR", "agprs"), ("SGPR", "sgprs"), ("LDS", "lds_bytes"),
            ("spills", "spills"), ("occupancy", "occupancy"))


def collect_stats(outdir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    from tiledsl.isa_stats import isa_stats

    root = Path(outdir)
    if not root.is_dir():
        raise TileError(f"{outdir}: not a directory (expected the -o directory of `tiledsl compile`)")
    rows, others = [], []
    for path in sorted(root.glob("*.json")):
        try:
            _regular_file(path, "manifest")
            manifest = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise TileError(f"{path}: not a readable manifest: {exc}") from None
        if not isinstance(manifest, dict) or "kernel" not in manifest or "arch" not in manifest:
            others.append(path.name)  # some other JSON file living in the directory
            continue
        asm_path = path.with_suffix(".s")
        try:
            asm = asm_path.read_text() if asm_path.exists() and _regular_file(asm_path, "assembly listing") else ""
        except (OSError, UnicodeDecodeError) as exc:
            raise TileError(f"{asm_path}: not a readable assembly listing: {exc}") from None
        try:
            row = isa_stats(asm, manifest).to_json()
        except (ValueError, TypeError, KeyError, TileError) as exc:  # a field edited by hand (an unknown arch...)
            raise TileError(f"{path}: not a manifest as `tiledsl compile` writes it: {type(exc).__name__}: "
                            f"{exc}") from None
        row["spills"] = row["vgpr_spills"] + row["sgpr_spills"]
        row["manifest"] = str(path)
        if not asm:
            row["instructions"] = row["mfma"] = row["wmma"] = row["matrix_ops"] = None
        rows.append(row)
    if not rows:
        skipped = f" ({', '.join(others)} lack 'kernel' or 'arch')" if others else ""
        raise TileError(f"{outdir}: no manifests (<kernel>.<arch>.json) found{skipped}")
    return rows


def _regular_file(path: Path, what: str) -> bool:
    """True, or a TileError where reading `path` would block (a FIFO) or never end (a device)."""
    from tiledsl.package import regular_file_problem

    problem = regular_file_problem(path)
    if problem:
        raise TileError(f"{path}: not a readable {what}: {problem}")
    return True


def format_table(rows: list[dict[str, Any]], columns: Sequence[tuple[str, str]] = _COLUMNS,
                 text_columns: int = 2) -> str:
    cells = [[h for h, _ in columns]] + [["-" if r.get(k) is None else str(r.get(k)) for _, k in columns]
                                         for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = []
    for n, row in enumerate(cells):
        # Names left-aligned, figures right-aligned, as tables of numbers read best.
        lines.append("  ".join(c.ljust(w) if i < text_columns else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cmd_inspect(args: argparse.Namespace) -> int:
    rows = collect_stats(args.outdir)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(format_table(rows))
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# doctor


def probe_gpu_mlir() -> str:
    """A tiny gpu-dialect kernel (each lane stores its id), built with the MLIR Python bindings:
    it exercises every backend stage without needing the front-end."""
    from mlir import ir
    from mlir.dialects import arith, gpu, memref

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.create()
        module.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
        with ir.InsertionPoint(module.body):
            gpu_module = gpu.GPUModuleOp("probe_module")
            gpu_module.bodyRegion.blocks.append()
            with ir.InsertionPoint(gpu_module.bodyRegion.blocks[0]):
                f32 = ir.F32Type.get()
                buf = ir.MemRefType.get([64], f32)
                func = gpu.GPUFuncOp(ir.TypeAttr.get(ir.FunctionType.get([buf], [])),
                                     sym_name="tiledsl_probe", kernel=True)
                block = func.body.blocks.append(buf)
                with ir.InsertionPoint(block):
                    tid = gpu.thread_id(gpu.Dimension.x)
                    value = arith.sitofp(f32, arith.index_cast(ir.IntegerType.get_signless(32), tid))
                    memref.store(value, block.arguments[0], [tid])
                    gpu.return_([])
        return str(module)


def probe_compile(arch_name: str, gpu_mlir: str) -> str:
    """Run the backend stages on the probe for one arch; returns a one-line verdict."""
    from tiledsl.backends.rocm import codegen, elf

    arch = get_arch(arch_name)
    t0 = time.perf_counter()
    asm, obj = codegen.make_isa_and_object(codegen.make_llir(codegen.make_rocdl(gpu_mlir, arch), arch), arch)
    hsaco = codegen.make_hsaco(obj)
    co = elf.read_code_object(hsaco)
    if co.arch != arch.name:
        raise TileError(f"code object is for {co.arch}, expected {arch.name}")
    if "tiledsl_probe.kd" not in co.symbols or "s_endpgm" not in asm:
        raise TileError("code object lacks the probe kernel")
    return f"ok ({(time.perf_counter() - t0) * 1000:.0f} ms)"


def hip_devices() -> tuple[list[str], str]:
    """gcnArchName of each visible AMD GPU (e.g. "gfx942:sramecc+:xnack-"), and why none if so."""
    try:
        from hip import hip  # hip-python: dlopens libamdhip64.so at its first call

        from tiledsl.backends.rocm.runtime.hip_device import HipDevice, device_count
    except Exception as exc:  # ImportError, or OSError from a broken ROCm install
        return [], f"hip-python unavailable ({type(exc).__name__}: {exc})"
    del hip
    try:
        count = device_count()
        if count == 0:
            return [], "no AMD GPU visible to HIP"
        names = []
        for i in range(count):
            try:
                names.append(HipDevice(i).gcn_arch_name)
            except TileError as exc:  # a GPU tiledsl does not target: list it, say why
                names.append(f"unsupported ({exc})")
        return names, ""
    except TileError as exc:
        return [], str(exc)


def _emulator_available() -> bool:
    from importlib.util import find_spec

    try:
        return find_spec("tiledsl.backends.rocm.emulator") is not None
    except (ImportError, ValueError):
        return False


def cmd_doctor(args: argparse.Namespace) -> int:
    from tiledsl.cache import default_cache_dir, toolchain_versions

    print(f"tiledsl {__version__}")
    print(f"python {platform.python_version()} ({sys.executable})")
    for pkg, version in toolchain_versions().items():
        print(f"  {pkg:<26} {version}")
    print(f"cache: {default_cache_dir()}")
    devices, why_not = hip_devices()
    emulator = "emulator" if _emulator_available() else "emulator (not installed yet)"
    try:
        probe = probe_gpu_mlir()
    except Exception as exc:
        print(f"error: cannot build MLIR with the Python bindings: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return EXIT_USER
    failures = 0
    rows = []
    for name in ARCH_NAMES:
        arch = get_arch(name)
        try:
            verdict = probe_compile(name, probe)
        except Exception as exc:  # doctor reports every arch, whatever broke
            failures += 1
            verdict = f"FAILED: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        matching = [i for i, d in enumerate(devices) if d.split(":")[0] == name]
        runs_on = f"HIP device {matching[0]} ({devices[matching[0]]})" if matching else emulator
        rows.append({"arch": name, "product": arch.product, "compile": verdict, "runs on": runs_on})
    print(format_table(rows, [(k, k) for k in ("arch", "product", "compile", "runs on")],
                       text_columns=4))
    from tiledsl.backends.rocm.runtime.hip_device import library_path

    print(f"HIP runtime: {library_path() or 'not loaded'}")
    if why_not:
        print(f"no HIP device: {why_not}")
    return EXIT_OK if failures == 0 else EXIT_USER
