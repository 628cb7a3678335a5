"""A soft limit on the memory a daydream command holds: past it, the command stops with one line.

The kernel's out-of-memory killer ends a process without a word (and may take others with it);
daydream stops itself first. A watcher thread reads the process's resident size a few times a
second; past `DAYDREAM_MAX_MEMORY` (default: 80% of what this machine, or its container, has)
it writes one line naming the size, what the command was doing and how to raise the limit,
removes the temporary files of outputs being written, and exits 2. `DAYDREAM_MAX_MEMORY=off`
turns the watch off.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from pathlib import Path

from daydream._environment import environment_size

VARIABLE = "DAYDREAM_MAX_MEMORY"
#: Of the memory this machine (or its container) has, the share a command may hold by default.
DEFAULT_SHARE = 0.8
#: How often the resident size is read, seconds.
INTERVAL_S = 0.1
EXIT_CODE = 2

_stage = "starting"
#: Temporary files of outputs being written
#: (daydream._files.atomic_output), removed when the watch stops a command.
PENDING: set[str] = set()


def note_stage(stage: str) -> None:
    """What the command is doing now (a progress stage: "reading",
    "simulating"), for the line the watch writes."""
    global _stage
    _stage = stage


def limit_bytes() -> int | None:
    """DAYDREAM_MAX_MEMORY in bytes (None: off), else DEFAULT_SHARE of the machine's or container's
    memory (None where neither can be read)."""
    text = os.environ.get(VARIABLE, "").strip().lower()
    if text in ("off", "none", "0"):
        return None
    available = available_bytes()
    default = int(available * DEFAULT_SHARE) if available else 0
    chosen = environment_size(VARIABLE, default)
    return chosen or None


def available_bytes() -> int | None:
    """The memory this process may use: the machine's, or its cgroup's limit where that is lower."""
    found = []
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        if pages > 0 and size > 0:
            found.append(pages * size)
    except (ValueError, OSError, AttributeError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            value = Path(path).read_text().strip()
        except OSError:
            continue
        if value.isdigit() and 0 < int(value) < 2**62:
            found.append(int(value))
    return min(found) if found else None


def resident_bytes() -> int | None:
    """This process's resident size now (Linux /proc; None elsewhere)."""
    try:
        fields = Path("/proc/self/statm").read_text().split()
        return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def watch() -> threading.Event | None:
    """Start the watch for this command (a daemon thread); set the returned event to stop it. None
    where it is off or the resident size cannot be read here."""
    limit = limit_bytes()
    if limit is None or resident_bytes() is None:
        return None
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(INTERVAL_S):
            resident = resident_bytes()
            if resident is not None and resident > limit:
                _stopped(resident, limit)

    threading.Thread(target=run, name="daydream-memory-watch", daemon=True).start()
    return stop


def _stopped(resident: int, limit: int) -> None:
    for path in list(PENDING):
        try:
            os.unlink(path)
        except OSError:
            pass
    suggestion = _size(max(2 * limit, 3 * resident // 2), whole=True)
    sys.stderr.write(f"daydream: error: stopped at {_size(resident)} resident while {_stage} "
                     f"(limit {_size(limit)}, {VARIABLE}) — raise it if the machine has the "
                     f"memory, e.g. {VARIABLE}={suggestion}, or read fewer ranks at once\n")
    sys.stderr.flush()
    os._exit(EXIT_CODE)


def _size(value: int, whole: bool = False) -> str:
    if value >= 2**30:
        return f"{math.ceil(value / 2**30)}GiB" if whole else f"{value / 2**30:.1f} GiB"
    return f"{math.ceil(value / 2**20)}MiB" if whole else f"{value / 2**20:.0f} MiB"
