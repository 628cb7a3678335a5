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
        libc: Any = ctypes.CDLL("libc.so.6")  # glibc's soname
    except OSError:  # elsewhere, ask the system: find_library runs `ldconfig -p` (about 15 ms)
        found = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(found) if found else None
        except OSError:
            libc = None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def give_back() -> None:
    """Return the heap's free memory to the operating system (glibc's
    malloc_trim), where the C library can."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
