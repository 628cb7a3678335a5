"""The torch.profiler backend: CPU ops (and CUDA kernels and runtime calls on a GPU), memory events."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from daydream.trace.collect import hooks as hook_module
from daydream.trace.collect.common import daydream_metadata
from daydream.trace.collect.runner import CaptureComplete, ScriptOutcome, run_script

if TYPE_CHECKING:
    from daydream.trace.collect.common import CaptureOptions, Status


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence what the profiler's C++ side prints on stderr when it starts and stops."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def record(options: CaptureOptions, status: Status | None) -> tuple[dict[str, Any] | None, int, ScriptOutcome]:
    """(trace document or None, iterations recorded, how the script ended)."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    warmup, active = options.warmup, options.iterations
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Pp]rofiler.*")  # no profiler warmup with --warmup 0: asked for
        plan = schedule(wait=max(warmup - 1, 0), warmup=min(warmup, 1), active=active, repeat=1)
    exported: dict[str, str] = {}
    scratch = tempfile.mkdtemp(prefix="daydream-capture-")

    def ready(profiler: Any) -> None:
        path = os.path.join(scratch, "trace.json")
        profiler.export_chrome_trace(path)
        exported["path"] = path

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Pp]rofiler.*")
        profiler = profile(activities=activities, schedule=plan, on_trace_ready=ready, record_shapes=True,
                           profile_memory=options.memory, with_stack=False)
    steps = 0
    wanted = warmup + active
    before = hook_module.MemoryBeforeTrace(warmup)

    def on_step() -> None:
        nonlocal steps
        steps += 1
        before.before_step(steps, installed)
        with _quiet_stderr():
            profiler.step()
        before.after_step(steps)
        if status:
            if steps < warmup:
                status(f"warming up: iteration {steps + 1} of {warmup}")
            elif steps < wanted:
                status(f"recording iteration {steps - warmup + 1} of {active}")
        if steps >= wanted and "path" in exported and not options.finish:
            raise CaptureComplete

    installed = hook_module.install(on_step, options.step_fn, search_path=options.search_path)
    if options.step_fn and ":" not in options.step_fn:
        hook_module.watch_script_function(options.step_fn, options.path, installed)
    if status:
        status("warming up" if warmup else f"recording iteration 1 of {active}")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Pp]rofiler.*")
        with _quiet_stderr():
            profiler.start()
        try:
            outcome = run_script(options.script, options.args, module=options.module)
        finally:
            installed.remove()
            if "path" not in exported:
                exported["incomplete"] = "1"
            with _quiet_stderr():
                try:
                    profiler.stop()
                except Exception:  # noqa: BLE001 - a profiler that never started recording has nothing to stop
                    pass
    outcome.steps = steps
    recorded = max(0, min(steps - warmup, active))
    try:
        if "incomplete" in exported or recorded < active:
            return None, recorded, outcome
        with open(exported["path"], encoding="utf-8") as handle:
            document = json.load(handle)
    finally:  # the scratch folder goes, whether the recording ended early or not
        shutil.rmtree(scratch, ignore_errors=True)
    layers = {path: info.as_metadata() for path, info in installed.layers.items()}
    document["daydream"] = daydream_metadata(options, "torch", layers, installed.batch_size, before.recorded())
    return document, recorded, outcome
