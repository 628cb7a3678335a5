"""Writing output files so that a failure never leaves a half-written one behind."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


@contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open a temporary file beside `path` for binary writing; rename it onto `path` on success.

        with atomic_output("report.html") as out:
            out.write(page.encode())

    On any exception the temporary file is removed and `path` is left as it was.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".tmp-", suffix="".join(target.suffixes[-2:]), dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            yield out
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it private; an output file is not
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` through a temporary file and a rename."""
    with atomic_output(path) as out:
        out.write(data)
