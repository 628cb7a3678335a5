"""What the collector and its backends share: the options of a capture,
its error, the metadata block it writes."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from daydream import __version__
from daydream.errors import DaydreamError
from daydream.trace.collect.runner import module_file
from daydream.trace.collect.speed import recorded_speed

#: Where a capture reports what it is doing (one line at a time).
Status = Callable[[str], None]


class CaptureError(DaydreamError):
    """The script ran but the wanted iterations could not be recorded.

    `script_error` is the script's own traceback when it failed, for
    the user to read above the one-line error.
    """

    def __init__(self, message: str, script_error: str = "", exit_code: int = 1) -> None:
        super().__init__(message)
        self.script_error = script_error
        self.exit_code = exit_code


@dataclass(slots=True)
class CaptureOptions:
    script: str
    args: list[str] = field(default_factory=list)
    warmup: int = 1
    iterations: int = 3
    out: str | None = None
    backend: str = "auto"
    finish: bool = False  # let the script run to its end after the capture
    step_fn: str | None = None
    memory: bool = True
    heap_reserve: bool = True  # keep and grow the C heap before recording (heap.py)
    module: bool = False  # `script` names a module, run as `python -m module` would
    # samples per iteration, when the model's first input does not say
    batch_size: int | None = None

    @property
    def path(self) -> str:
        """The file that runs: the script, or the module's file."""
        return module_file(self.script) if self.module else self.script

    @property
    def search_path(self) -> str:
        """Where the script's own imports are found first: its folder
        (the current folder under -m)."""
        return os.getcwd() if self.module else os.path.dirname(os.path.abspath(self.script))


def daydream_metadata(options: CaptureOptions, backend: str, layers: dict[str, Any],
                      batch_size: int | None = None,
                      memory_before: dict[str, dict[str, int]] | None = None,
                      host_usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `daydream` block of a recorded trace. `memory_before`: per device, what the models and
    optimizers held at the start of the first recorded iteration (hooks.memory_snapshot); None when
    nothing ran before it (--warmup 0). `host_usage`: page faults and system time per recorded
    iteration (usage.HostUsage), None where they were not counted."""
    return {
        "collector": "daydream trace",
        "version": __version__,
        "backend": backend,
        "script": os.path.abspath(options.path),
        **({"module": options.script} if options.module else {}),
        "args": options.args,
        "warmup": options.warmup,
        "iterations": options.iterations,
        "layers": layers,
        # samples per iteration: --batch-size, else the leading dimension of the model's first input
        "batch_size": options.batch_size or batch_size,
        "memory_before": memory_before,
        "host": host_facts(),
        **({"host_usage": host_usage} if host_usage else {}),
    }


def host_facts() -> dict[str, int]:
    """The CPUs this process may run on and torch's intra-op threads: how much room the host leaves
    for communication threads (the contention model of the distributed what-ifs); and how fast the
    CPU ran just after the recorded iterations (speed.py: the measured tier's times are carried to
    it)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    facts = {"cpus": cpus}
    torch = sys.modules.get("torch")
    if torch is not None:
        facts["intra_op_threads"] = int(torch.get_num_threads())
    return {**facts, **recorded_speed()}
