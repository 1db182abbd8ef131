"""The tile language's front end: parser.py (text -> AST), checker.py and typer.py (bound, typed
kernel), ast.py. This module stays light: the driver imports it on every compile."""

from __future__ import annotations

import sys

# The deepest parse tree accepted: a 990-term sum, 990 unary minuses or 490 nested ifs. Real
# kernels nest about 20 levels (fmha_bwd_dq_dk_dv.tile: 23), but generated code chains long sums.
MAX_DEPTH = 1000
# Every stage walks the AST and the IR recursively, up to about 8 Python frames per level (a
# 1,000-term sum compiled with a limit of 8,000 frames and not 5,500).
RECURSION_LIMIT = 10 * MAX_DEPTH + 2000


def make_recursion_room() -> None:
    """Raise Python's recursion limit to RECURSION_LIMIT, never lowering it: another thread may be
    compiling a deep program meanwhile."""
    if sys.getrecursionlimit() < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)
