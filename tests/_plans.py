"""The plan a library call runs, caught on its way to Plan.run (for tests that then run it with
inputs the library's own checks would have refused, as a C caller could pass them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tiledsl.plan import Plan


def captured_plan(monkeypatch, op: Callable[..., Any], **call: Any) -> tuple[Plan, Any, dict, Any]:
    """The plan `op(**call)` runs, its device and environment, and the call's output: the plan is
    run once as the library runs it."""
    seen = []
    real_run = Plan.run

    def spy(self, device, env, workspace=None):
        seen.append((self, device, dict(env)))
        return real_run(self, device, env, workspace)

    with monkeypatch.context() as m:
        m.setattr(Plan, "run", spy)
        out = op(**call)
    assert len(seen) == 1
    return (*seen[0], out)
