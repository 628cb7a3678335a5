"""Handing freed memory back to the operating system.

Reading a trace frees a large buffer (the decompressed text) and many small objects; glibc keeps
such memory in its heap for reuse (and, after a large block is freed, raises the size below which
it serves requests from that heap), so a process's RSS stays at its peak although the memory is
free. `give_back` asks glibc to release it; elsewhere (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from functools import cache
from typing import Any


@cache
def _glibc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def give_back() -> None:
    """Return the heap's free memory to the operating system (glibc's
    malloc_trim), where the C library can."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
