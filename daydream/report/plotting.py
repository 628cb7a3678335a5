"""matplotlib for the PNGs daydream draws (`memory --plot`, `whatif
--sweep --plot`): optional, and checked first.

`require()` is called by a command before any work, so a missing matplotlib is said at
once rather than after a long read; `pyplot()` returns the module with the file-only Agg
backend selected.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from daydream._files import atomic_output
from daydream.errors import InputError

INSTALL = "--plot needs matplotlib — pip install matplotlib"


def require() -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise InputError(INSTALL)


def pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError(INSTALL) from None
    return plt


def save_png(figure: Any, path: str | os.PathLike[str]) -> None:
    """`figure` laid out and written to `path` as a PNG (atomically),
    then closed, whether the write worked or not."""
    try:
        figure.tight_layout()
        with atomic_output(path) as out:
            figure.savefig(out, dpi=110, format="png")
    finally:
        pyplot().close(figure)
