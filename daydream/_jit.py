"""Optional numba compilation for the few array loops that must run at native speed.

`jit(f)` compiles `f` with numba when it is installed (cached on disk) and returns
`f` unchanged otherwise; the plain-Python function stays reachable as
`f.py_func` either way, so tests can check the compiled path against it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

try:
    if os.environ.get("DAYDREAM_NO_JIT"):
        raise ImportError("disabled by DAYDREAM_NO_JIT")
    import numba as _numba

    numba: Any = _numba
except ImportError:  # pragma: no cover - exercised where numba is absent
    numba = None


def jit(function: F) -> F:
    if numba is None:
        # as numba's compiled functions carry it
        function.py_func = function  # type: ignore[attr-defined]
        return function
    try:
        compiled: F = numba.njit(cache=True, nogil=True)(function)
    except RuntimeError:
        # no writable place for numba's cache (a read-only install, no
        # writable home): compile each run
        compiled = numba.njit(cache=False, nogil=True)(function)
    return compiled
