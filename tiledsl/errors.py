"""Errors are a user interface: every error names where it happened and what was expected."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLocation:
    file: str
    line: int  # 1-based
    col: int  # 1-based

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class TileError(Exception):
    """Base class of every error tiledsl reports to a user (CLI exit status 2)."""


class SourceError(TileError):
    """An error in a .tile source, shown as file:line:col, the source line and a caret."""

    def __init__(self, message: str, loc: SourceLocation | None, source: str | None = None,
                 hint: str | None = None):
        self.message = message
        self.loc = loc
        self.source = source
        self.hint = hint
        super().__init__(self.render())

    def __reduce__(self) -> tuple:  # so the error survives a process pool (pickling)
        return type(self), (self.message, self.loc, self.source, self.hint)

    def render(self) -> str:
        if self.loc is None:
            return f"error: {self.message}"
        text = f"{self.loc}: error: {self.message}"
        if self.source is not None:
            # Lines as the parser counts them: only '\n' ends one (str.splitlines would also split
            # at '\r', form feeds and U+2028 and put the caret on the wrong line).
            lines = self.source.split("\n")
            if 1 <= self.loc.line <= len(lines):
                line = "".join(ch if ch.isprintable() else " " for ch in lines[self.loc.line - 1].expandtabs(1))
                line, col = _window(line, self.loc.col - 1)
                text += f"\n    {line}\n    {' ' * col}^"
        if self.hint:
            text += f"\nhint: {self.hint}"
        return text


SHOWN_COLUMNS = 100  # of a source line around the caret: a generated line may be megabytes long


def _window(line: str, col: int) -> tuple[str, int]:
    """At most SHOWN_COLUMNS of `line` around column `col` (0-based), with "..." where it is cut,
    and the caret's column in what is shown."""
    if len(line) <= SHOWN_COLUMNS:
        return line, col
    start = max(0, min(col - SHOWN_COLUMNS // 2, len(line) - SHOWN_COLUMNS))
    shown = line[start:start + SHOWN_COLUMNS]
    head = "..." if start else ""
    tail = "..." if start + SHOWN_COLUMNS < len(line) else ""
    return head + shown + tail, len(head) + col - start


class CompileError(TileError):
    """A compiler stage failed; names the stage and where its input IR was saved."""

    def __init__(self, stage: str, message: str, saved_input: str | None = None):
        self.stage = stage
        self.saved_input = saved_input
        text = f"stage '{stage}' failed: {message}"
        if saved_input:
            text += f"\n(the IR it failed on is saved at {saved_input})"
        self.detail = message
        super().__init__(text)

    def __reduce__(self) -> tuple:
        return type(self), (self.stage, self.detail, self.saved_input)
