"""The one exception hierarchy of daydream.

Every message says what failed, where, and what to do next; the CLI turns a
`DaydreamError` into one line on stderr and its `exit_code`.
"""

from __future__ import annotations


class DaydreamError(Exception):
    """Base of every error daydream raises on purpose."""

    exit_code = 1


class InputError(DaydreamError):
    """The user handed daydream something it cannot use (a path, an option)."""

    exit_code = 2


class TraceFormatError(InputError):
    """A file is not a readable trace: empty, truncated, not JSON, not a trace."""

    def __init__(self, source: str, problem: str,
                 hint: str = "is this a PyTorch profiler trace?") -> None:
        self.source = source
        self.problem = problem
        self.hint = hint
        super().__init__(f"{source}: {problem} — {hint}" if hint else f"{source}: {problem}")

    def __reduce__(self) -> tuple[type[TraceFormatError], tuple[str, str, str]]:
        # Rebuilt from its parts, not from its message: a rank read in
        # a worker process sends it back pickled.
        return type(self), (self.source, self.problem, self.hint)
