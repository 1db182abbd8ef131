"""A seeded fuzzer for the compiler's front end and the ops' argument checks.

Sources: the shipped kernels and examples, mutated token by token (delete, duplicate, swap,
extreme numbers, other names and keywords, stray characters, deep nesting, huge tiles), then run
through parse -> check -> emit -> our tile passes. Every failure must be a TileError (a located
SourceError or a CompileError naming its stage): anything else is an internal error, reported with
the mutated source so it can become a test. API calls: `fmha_fwd` and `fmha_num_splits` with random
bad arguments must raise ValueError or TileError, never anything else; `fmha_bwd` and
`fmha_fwd_kvcache` calls with one or two arguments from a table of bad values must be refused.

    python tests/fuzz.py --count 3000 --seed 1     (`make fuzz`; tests/test_fuzz.py runs a sample)
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*ROOT.glob("examples/*.tile"), *ROOT.glob("tests/kernels/*.tile"),
                  *ROOT.glob("tiledsl/kernels/*.tile")])
TOKEN = re.compile(r"\s+|#[^\n]*|\d+\.\d*(?:[eE][-+]?\d+)?|\d+|[A-Za-z_]\w*|<<|>>|<=|>=|==|!=|//|.", re.S)
EXTREME_NUMBERS = ["0", "1", "-1", "3", "7", "4096", "65536", "2147483647", "2147483648", "1e39", "-0.0", "1e-45",
                   "0x10", "99999999999999999999"]
STRAY = ["@", "$", "`", "\\", "'", '"', "?", "~", "\x00", "\t", "\f", "\u2028", "\u00e9", "\U0001f600", "{", "}", "(",
         ")", "[", "]", ",", ";", ":", "=", "-", "!"]
KEYWORDS = ["let", "for", "in", "range", "if", "else", "kernel", "grid", "waves", "tensor", "stages", "None", "true",
            "and", "not", "inf", "nan", "f8e4m3", "i1", "bf16"]


def tokens(source: str) -> list[str]:
    return TOKEN.findall(source)


OPERATORS = ["+", "-", "*", "/", "//", "%", "<<", ">>", "&", "|", "^", "<", "<=", "==", "!=", "and", "or"]
DTYPES = ["f16", "bf16", "f32", "i32", "i1", "f8e4m3"]


def mutate(source: str, rng: random.Random) -> str:
    """One to three random token-level mutations of `source`; most keep the syntax valid (numbers,
    names, operators, dtypes) so that the checker and the passes see them."""
    toks = tokens(source)
    names = sorted({t for t in toks if (t[:1].isalpha() or t[:1] == "_") and t not in KEYWORDS})
    for _ in range(rng.randint(1, 3)):
        solid = [i for i, t in enumerate(toks) if t and not t.isspace() and not t.startswith("#")]

        def pick(pred: Callable[[str], bool], solid: list[int] = solid) -> int:
            hits = [k for k in solid if pred(toks[k])]
            return rng.choice(hits) if hits else rng.choice(solid)

        kind = rng.choices(range(10), weights=[1, 1, 1, 5, 5, 1, 1, 1, 1, 3])[0]
        i = rng.choice(solid)
        if kind == 0:
            toks[i] = ""
        elif kind == 1:
            toks.insert(i, toks[i])
        elif kind == 2:
            j = rng.choice(solid)
            toks[i], toks[j] = toks[j], toks[i]
        elif kind == 3:  # a number: extreme values, often where a tile size or a constexpr goes
            toks[pick(lambda t: t[:1].isdigit())] = rng.choice(EXTREME_NUMBERS)
        elif kind == 4:  # a name for another of the program's names
            toks[pick(lambda t: t in names)] = rng.choice(names)
        elif kind == 5:
            toks[i] = rng.choice(KEYWORDS)
        elif kind == 6:
            toks.insert(i, rng.choice(STRAY))
        elif kind == 7:  # nest an operand deeply
            j = pick(lambda t: t in names)
            depth = rng.choice([20, 60, 150])
            toks[j] = "(" * depth + toks[j] + ")" * depth if rng.random() < 0.5 else "-" * depth + toks[j]
        elif kind == 8:  # a huge or odd tile
            toks.insert(pick(lambda t: t in ("load", "exp2", "cast", "where")),
                        rng.choice(["zeros([4096, 4096], f32) + ", "arange(0, 3) + ", "arange(5, 1) + ",
                                    "zeros([], f32) + ", "full([64, 64], 1, i1) + "]))
        else:  # an operator or a dtype for another
            j = pick(lambda t: t in OPERATORS or t in DTYPES)
            toks[j] = rng.choice(DTYPES if toks[j] in DTYPES else OPERATORS)
    return "".join(toks)


@dataclass
class Finding:
    seed: int
    origin: str
    arch: str
    source: str
    error: str


def compile_front(source: str, filename: str, arch: str, defines: dict[str, str]) -> None:
    """parse -> check -> emit -> tile passes, as the driver runs them (its error conversions)."""
    from tiledsl.backends.rocm.arch import get_arch
    from tiledsl.driver import STAGE_NAMES, START_EXTENSIONS, StageContext, run_stages
    from tiledsl.options import CompileOptions

    ctx = StageContext(get_arch(arch), CompileOptions.make(arch, defines), filename, dict(defines), prefix="fuzz",
                       source=source)
    run_stages(ctx, source, START_EXTENSIONS["tile"], "tile", stop=STAGE_NAMES.index("gpu.mlir") + 1)


def fuzz_sources(count: int, seed: int, archs: list[str]) -> list[Finding]:
    from tiledsl.errors import TileError

    rng = random.Random(seed)
    texts = {p: p.read_text() for p in SOURCES}
    found = []
    for n in range(count):
        origin = rng.choice(SOURCES)
        source = mutate(texts[origin], rng)
        arch = rng.choice(archs)
        try:
            compile_front(source, origin.name, arch, {})
        except TileError:
            pass
        except Exception as exc:  # noqa: BLE001 -- an internal error is what we look for
            found.append(Finding(n, origin.name, arch, source,
                                 "".join(traceback.format_exception_only(type(exc), exc)).strip()))
    return found


def _bad_values(rng: random.Random, like: Any) -> Any:
    import numpy as np

    choices: list[Callable[[], Any]] = [
        lambda: None, lambda: "q", lambda: 3, lambda: float("nan"), lambda: [1, 2], lambda: like.astype(np.float32),
        lambda: like[..., :1], lambda: like[0], lambda: like[:, :0], lambda: np.zeros((1, 1, 1, 512), like.dtype),
        lambda: like.transpose(0, 2, 1, 3), lambda: like[..., ::2], lambda: np.asfortranarray(like),
        lambda: like.astype(np.int32), lambda: np.zeros((2, 3), like.dtype), lambda: object(),
    ]
    return rng.choice(choices)()


KWARGS = {
    "scale": [None, 0.0, -1.0, 1e39, float("inf"), "1", True, 10**40],
    "causal": [True, False, "top_left", "bottom_right", 1, 1.0, "yes", None],
    "window": [(-1, -1), (0, 0), (3, 1), (-2, 0), (1,), (1.5, 2), "3", None, (10**12, 0)],
    "softcap": [0.0, 30.0, -1.0, float("nan"), True, "x"],
    "sink": [None, "sink", [0.0, 1.0]],
    "layout": ["bshd", "bhsd", "sbhd", None, 3],
    "num_splits": [0, 1, 2, 64, -1, 2.5, "auto", 10**9],
    "return_lse": [True, False, 1, "no"],
    "arch": ["gfx942", "gfx1100", "gfx9", None, 942],
    "cu_seqlens_q": [None, [0, 3], "0,3"],
    "max_seqlen_q": [None, -1, 0, 3.5],
}


def fuzz_api(count: int, seed: int) -> list[Finding]:
    import numpy as np

    from tiledsl.errors import TileError
    from tiledsl.ops import fmha_fwd

    rng = random.Random(seed)
    found = []
    for n in range(count):
        nrng = np.random.default_rng(n)
        q = nrng.standard_normal((1, rng.choice([1, 5, 17]), 2, rng.choice([16, 64, 80]))).astype(np.float16)
        k = nrng.standard_normal((1, rng.choice([1, 7, 17]), rng.choice([1, 2]), q.shape[-1])).astype(np.float16)
        v = k.copy()
        args = [q, k, v]
        if rng.random() < 0.6:
            args[rng.randrange(3)] = _bad_values(rng, args[0])
        kwargs = {"arch": "gfx942"}
        for name in rng.sample(sorted(KWARGS), rng.randint(0, 3)):
            kwargs[name] = rng.choice(KWARGS[name])
        if kwargs.get("sink") == "sink":
            kwargs["sink"] = np.array(rng.choice([[0.0, 1.0], [np.inf, 0.0], [np.nan, 1.0], [0.0]]))
        try:
            fmha_fwd(*args, **kwargs)
        except (ValueError, TileError):
            pass
        except Exception as exc:  # noqa: BLE001
            desc = f"fmha_fwd({', '.join(getattr(a, 'shape', repr(a)).__str__() for a in args)}, {kwargs!r})"
            found.append(Finding(n, "fmha_fwd", "gfx942", desc,
                                 "".join(traceback.format_exception_only(type(exc), exc)).strip()))
        found += _fuzz_num_splits(n, rng)
    return found


SPLIT_VALUES = [1, 4, 128, 0, -1, 2**40, 2.5, "8", True, None]


def _fuzz_num_splits(n: int, rng: random.Random) -> list[Finding]:
    """fmha_num_splits (pure host code) with random sizes and options: a ValueError or an int."""
    from tiledsl.ops import fmha_num_splits

    kwargs: dict[str, Any] = {name: rng.choice(SPLIT_VALUES[:4] if rng.random() < 0.7 else SPLIT_VALUES)
                              for name in ("batch", "nhead_q", "max_seqlen_q", "max_seqlen_k")}
    kwargs["hdim_q"] = rng.choice([64, 128, 80, 0, 300, "64"])
    for name in rng.sample(["hdim_v", "nhead_k", "causal", "window"], rng.randint(0, 2)):
        kwargs[name] = rng.choice(KWARGS.get(name, SPLIT_VALUES))
    arch = rng.choice(["gfx942", "gfx1201", "gfx9", None])
    try:
        splits = fmha_num_splits(arch, **kwargs)  # type: ignore[arg-type]
        if not isinstance(splits, int) or splits < 1:
            raise AssertionError(f"returned {splits!r}, not a split count")
    except ValueError:
        return []
    except Exception as exc:  # noqa: BLE001
        return [Finding(n, "fmha_num_splits", str(arch), f"fmha_num_splits({arch!r}, **{kwargs!r})",
                        "".join(traceback.format_exception_only(type(exc), exc)).strip())]
    return []


# Values each argument must refuse (whatever the others are): a call with one of them must raise
# ValueError or TileError before anything compiles. Accepting one is a finding too.
BAD_BWD = {
    "scale": [float("nan"), float("inf"), "1", True, 1e39],
    "causal": [1.0, "yes", None, 2],
    "window": [(1,), (1.5, 2), "3", (-2, 0), None],
    "softcap": [-1.0, float("nan"), True, "x"],
    "layout": ["sbhd", 3, None],
    "deterministic": [1, "yes", None],
    "dropout_p": [1.0, -0.1, float("nan"), "0.1", True],
    "seed": [-1, 2**64, 1.5, "s"],
    "arch": ["gfx9", 942, ""],
    "device": ["cuda", 3, "hip:x"],
    "return_dbias": [1, "x"],
    "bias": ["b", [[1.0]], "int32 [9, 11]", "f16 [3, 3]"],
    "alibi_slopes": ["a", "f32 [3]"],
    "max_seqlen_q": [-1, 3.5, 3],
    "sink": ["s", "f32 [5]", "inf [2]"],
}
BAD_KVCACHE = {
    "cache_seqlens": [-1, 2**40, 3.5, "x", "i32 [2]", "f32 [1]", "i32 [1] = 99"],
    "block_table": ["x", "f32 [1, 1]", "i32 [1, 1] = 99"],
    "num_splits": [-1, 2.5, True],
    "return_lse": [1, "yes"],
    "bias": ["f16 [9, 11]"],
    "cache_batch_idx": ["i32 [1] = 5", "x"],
    "rotary_cos": ["f32 [2, 70]"],
    "scale": [float("nan"), "1"],
    "causal": ["yes", 1.0],
}


def _bad_value(spec: Any) -> Any:
    """A BAD_* entry as a value: "DTYPE [SHAPE]" (optionally "= FILL") names an array."""
    import numpy as np

    if isinstance(spec, str) and "[" in spec:
        kind, rest = spec.split(" [", 1)
        shape = tuple(int(x) for x in rest.split("]")[0].split(",") if x.strip())
        fill = float(rest.split("=")[1]) if "=" in rest else 0.0
        dtype = {"f16": np.float16, "f32": np.float32, "int32": np.int32, "i32": np.int32, "inf": np.float32}[kind]
        return np.full(shape, np.inf if kind == "inf" else fill, dtype)
    return spec


def fuzz_bad_calls(count: int, seed: int) -> list[Finding]:
    """fmha_bwd and fmha_fwd_kvcache with valid arguments but one or two from BAD_BWD/BAD_KVCACHE:
    each call must be refused (ValueError or TileError) before anything compiles or runs."""
    import numpy as np

    from tiledsl.errors import TileError
    from tiledsl.ops import fmha_bwd, fmha_fwd_kvcache

    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    q, k = (nrng.standard_normal(s).astype(np.float16) for s in ((1, 9, 2, 64), (1, 11, 1, 64)))
    lse = np.zeros((1, 2, 9), np.float32)
    found = []
    for n in range(count):
        bwd = rng.random() < 0.5
        table = BAD_BWD if bwd else BAD_KVCACHE
        kwargs: dict[str, Any] = {"arch": "gfx942"}
        if not bwd:
            kwargs["cache_seqlens"] = np.array([3], np.int32)
        if not bwd and rng.random() < 0.5:
            kwargs["block_table"] = np.array([[0]], np.int32)
        for name in rng.sample(sorted(table), rng.randint(1, 2)):
            kwargs[name] = _bad_value(rng.choice(table[name]))
        if kwargs.get("dropout_p") is None and "seed" in kwargs:
            kwargs["dropout_p"] = 0.1  # a seed is checked whatever the rate; keep the call otherwise valid
        try:
            if bwd:
                fmha_bwd(q, q, k, k, q, lse, **kwargs)
            else:
                cache = np.zeros((1, 16, 1, 64), np.float16)
                fmha_fwd_kvcache(q, cache, cache.copy(), **kwargs)
        except (ValueError, TileError):
            continue
        except Exception as exc:  # noqa: BLE001
            error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        else:
            error = "accepted: a call with a bad argument ran"
        op = "fmha_bwd" if bwd else "fmha_fwd_kvcache"
        found.append(Finding(n, op, "gfx942", f"{op}(..., **{kwargs!r})", error))
    return found


def report(findings: list[Finding]) -> str:
    out = []
    for f in findings[:5]:
        out.append(f"--- seed {f.seed} ({f.origin}, {f.arch}): {f.error}\n{f.source[:3000]}")
    return f"{len(findings)} internal errors\n" + "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from tiledsl.backends.rocm.arch import ARCH_NAMES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=500, help="mutated sources (and as many API calls / 4)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    findings = (fuzz_sources(args.count, args.seed, list(ARCH_NAMES)) + fuzz_api(args.count // 4, args.seed)
                + fuzz_bad_calls(args.count // 4, args.seed))
    print(report(findings) if findings else
          f"{args.count} sources, {args.count // 4} API calls, {args.count // 4} bad calls: no internal errors")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
