"""Pictures of the timing model's figures (`tiledsl profile --plot`): a roofline and a timeline.

matplotlib is an optional extra (`pip install tiledsl[plot]`); without it these raise a TileError
that says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tiledsl.backends.rocm.arch import Arch
from tiledsl.errors import TileError

# One colour per pipe, the same in every picture.
PIPE_COLOURS = {"matrix": "#c0392b", "valu": "#2980b9", "trans": "#8e44ad", "lds": "#27ae60", "vmem load": "#e67e22",
                "vmem store": "#d35400", "smem": "#7f8c8d"}


def pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise TileError("--plot needs matplotlib: pip install 'tiledsl[plot]' (or pip install matplotlib)") from None
    return plt


def plot_roofline(arch: Arch, launches: Sequence[Any], path: str | Path) -> None:
    """The arch's matrix and memory roofs, and each launch at (FLOPs per compulsory DRAM byte,
    modeled TFLOP/s)."""
    plt = pyplot()
    t = arch.timing
    peak = arch.peak_tflops_f16 / t.dies
    bandwidth = t.hbm_tb_s / t.dies  # TB/s
    ridge = peak / bandwidth
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [ridge / 100, ridge, ridge * 100]
    ax.loglog(xs, [min(peak, x * bandwidth) for x in xs], color="black", lw=1.5)
    ax.text(ridge * 1.2, peak * 1.08, f"matrix peak {peak:.0f} TFLOP/s (f16, dense)", fontsize=8)
    ax.text(xs[0] * 1.2, xs[0] * bandwidth * 1.6, f"{bandwidth:.2f} TB/s", fontsize=8, rotation=28)
    for lt in launches:
        if lt.dram_bytes and lt.matrix_flops:
            x, y = lt.matrix_flops / lt.dram_bytes, lt.matrix_tflops
            ax.plot([x], [y], "o")
            ax.annotate(f"{lt.kernel}\n{y:.0f} TFLOP/s", (x, y), textcoords="offset points", xytext=(6, -18),
                        fontsize=8)
    ax.set_xlabel("matrix FLOPs per byte of compulsory memory traffic")
    ax.set_ylabel("TFLOP/s (modeled)")
    ax.set_title(f"{arch.name} ({arch.product}): roofline, timing model")
    fig.tight_layout()
    _save(fig, path, 120)


def plot_timeline(launch: Any, path: str | Path) -> None:
    """One workgroup's waves (rows) over time, each instruction a bar coloured by its pipe (memory
    bars run from issue to data returned)."""
    plt = pyplot()
    rows = sorted({w for w, *_ in launch.timeline})
    if not rows:
        raise TileError(f"no timeline was recorded for {launch.kernel}")
    fig, ax = plt.subplots(figsize=(11, 1 + 0.5 * len(rows)))
    for kind, colour in PIPE_COLOURS.items():
        bars: dict[int, list[tuple[float, float]]] = {}
        for w, k, start, end in launch.timeline:
            if k == kind:
                bars.setdefault(w, []).append((start, max(end - start, 1.0)))
        for w, segs in bars.items():
            lane = rows.index(w) + (0.0 if kind in ("matrix", "valu", "trans") else 0.45)
            ax.broken_barh(segs, (lane, 0.4), facecolors=colour, label=kind if w == min(bars) else None)
    ax.set_yticks([i + 0.4 for i in range(len(rows))], [f"wave {w}" for w in rows])
    ax.set_xlabel("cycles")
    ax.set_title(f"{launch.kernel} on {launch.arch}: first simulated workgroup (ALU pipes above, memory below)")
    ax.legend(loc="upper right", fontsize=7, ncols=4)
    fig.tight_layout()
    _save(fig, path, 110)


def _save(fig: Any, path: str | Path, dpi: int) -> None:
    """Write the picture; a full disk or a directory in the way is the caller's error, naming the file."""
    try:
        fig.savefig(path, dpi=dpi)
    except OSError as exc:
        raise TileError(f"--plot: cannot write {path}: {exc.strerror or exc}") from None
    finally:
        pyplot().close(fig)
