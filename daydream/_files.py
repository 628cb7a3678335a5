"""Writing output files so that a failure never leaves a half-written one behind."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from daydream._memory import PENDING


@contextmanager
def atomic_output(path: str | os.PathLike[str], cache: bool = False) -> Iterator[BinaryIO]:
    """Open a temporary file beside `path` for binary writing; rename it onto `path` on success.

        with atomic_output("report.html") as out:
            out.write(page.encode())

    On any exception the temporary file is removed and `path` is left as it was. An output the user
    named that is a character device or a FIFO (`/dev/null`, `/dev/stdout`, a pipe) is written in
    place, never replaced by a file; a directory, block device or socket there is an InputError. A
    `cache` file is always replaced.
    """
    target = Path(path)
    special = None if cache else _special(target)
    if special == "stream":
        with open(target, "wb") as out:
            yield out
        return
    if special is not None:
        from daydream.errors import InputError

        raise InputError(f"{path}: is a {special}, not a file: give the path of a file to write")
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".tmp-", suffix="".join(target.suffixes[-2:]),
                                         dir=target.parent)
    PENDING.add(temporary)  # the memory watch removes it if it stops the command (daydream._memory)
    try:
        with os.fdopen(handle, "wb") as out:
            yield out
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it private; an output file is not
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    finally:
        PENDING.discard(temporary)


def _special(target: Path) -> str | None:
    """"stream" for a character device or FIFO at `target`, the kind of another non-file there, None
    for a regular file or nothing."""
    try:
        mode = target.stat().st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return "stream"
    return {stat.S_ISDIR(mode): "directory", stat.S_ISBLK(mode): "block device",
            stat.S_ISSOCK(mode): "socket"}.get(
        True, "special file")


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_atomically(path: str | os.PathLike[str], data: bytes, cache: bool = False) -> None:
    """Write `data` to `path` through a temporary file and a rename (see atomic_output)."""
    with atomic_output(path, cache=cache) as out:
        out.write(data)
