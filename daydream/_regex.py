"""Regular expressions from users, matched in linear time.

Patterns given on the command line or in a file (`--iteration-marker`, `kernels=`,
`layers=`, a pipeline's `select.name`) run over every name in a trace, and a trace's
names are data nobody vetted: with a backtracking engine, `(a+)+$` over one long name
never returns. `user_regex` compiles a pattern with RE2 (google-re2), whose matching
time is linear in the text; RE2 has no backreferences or lookarounds, and a pattern that
uses them is refused with a message that says so.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import re2

from daydream.errors import InputError


class Pattern(Protocol):
    pattern: str

    def search(self, text: str) -> object | None: ...


class _Linear:
    """A compiled RE2 pattern with the `search` and `pattern` of `re.Pattern`."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str, compiled: Any) -> None:  # an RE2 or a re pattern: both search
        self.pattern = pattern
        self._compiled = compiled

    def search(self, text: str) -> object | None:
        return self._compiled.search(text)


def user_regex(pattern: str, what: str, example: str = "") -> Pattern:
    """Compile `pattern` for linear-time matching; InputError naming `what` when it cannot be.

    `what` is how the user wrote the option (e.g. "--iteration-marker", "faster-gpu:kernels"),
    `example` a pattern that would work, for the message.
    """
    hint = f" — e.g. {example}" if example else ""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InputError(f"{what} {pattern!r}: not a regular expression ({exc}){hint}") from None
    except RecursionError:
        raise InputError(f"{what}: the regular expression nests too deeply{hint}") from None
    options = re2.Options()
    options.log_errors = False
    try:
        return _Linear(pattern, re2.compile(pattern, options))
    except Exception as exc:  # re2.error: the pattern uses what a linear-time engine cannot run
        raw = exc.args[0] if exc.args else None
        reason = raw.decode(errors="replace") if isinstance(raw, bytes) else str(exc)
        raise InputError(f"{what} {pattern!r}: {reason} — daydream matches in linear time (RE2), "
                         "without backreferences or lookarounds; rewrite the pattern without "
                         "them") from None
