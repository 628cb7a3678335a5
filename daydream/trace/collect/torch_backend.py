"""The torch.profiler backend: CPU ops (and CUDA kernels and runtime
calls on a GPU), memory events."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from typing import TYPE_CHECKING, Any

from daydream._quiet import quiet_stderr
from daydream.trace.collect import hooks as hook_module
from daydream.trace.collect.common import daydream_metadata
from daydream.trace.collect.runner import CaptureComplete, ScriptOutcome, run_script
from daydream.trace.collect.usage import HostUsage

if TYPE_CHECKING:
    from daydream.trace.collect.common import CaptureOptions, Status


def record(options: CaptureOptions,
           status: Status | None) -> tuple[dict[str, Any] | None, int, ScriptOutcome]:
    """(trace document or None, iterations recorded, how the script ended)."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    scratch = tempfile.mkdtemp(prefix="daydream-capture-")
    capture = _Capture(options, status, scratch)
    outcome = capture.run()
    recorded = max(0, min(capture.steps - options.warmup, options.iterations))
    try:
        if "incomplete" in capture.exported or recorded < options.iterations:
            return None, recorded, outcome
        with open(capture.exported["path"], encoding="utf-8") as handle:
            document = json.load(handle)
    finally:  # the scratch folder goes, whether the recording ended early or not
        shutil.rmtree(scratch, ignore_errors=True)
    layers = {path: info.as_metadata() for path, info in capture.installed.layers.items()}
    document["daydream"] = daydream_metadata(options, "torch", layers, capture.installed.batch_size,
                                             capture.before.recorded(), capture.usage.recorded())
    return document, recorded, outcome


class _Capture:
    """One torch.profiler recording of the script: the profiler stepped at each iteration boundary
    the hooks see, its trace exported into `scratch` when the schedule's active iterations end."""

    def __init__(self, options: CaptureOptions, status: Status | None, scratch: str) -> None:
        self.options, self.status, self.scratch = options, status, scratch
        self.steps = 0
        self.exported: dict[str, str] = {}
        self.before = hook_module.MemoryBeforeTrace(options.warmup)
        self.usage = HostUsage.recording(options.warmup, options.iterations, options.heap_reserve)
        self.profiler = self._profiler()
        self.installed = hook_module.install(self.on_step, options.step_fn,
                                             search_path=options.search_path)
        if options.step_fn and ":" not in options.step_fn:
            hook_module.watch_script_function(options.step_fn, options.path, self.installed)

    def _profiler(self) -> Any:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = ([ProfilerActivity.CPU]
                      + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else []))
        warmup, active = self.options.warmup, self.options.iterations
        with warnings.catch_warnings():
            # no profiler warmup with --warmup 0: asked for
            warnings.filterwarnings("ignore", message=".*[Pp]rofiler.*")
            plan = schedule(wait=max(warmup - 1, 0), warmup=min(warmup, 1), active=active, repeat=1)
            return profile(activities=activities, schedule=plan, on_trace_ready=self.ready,
                           record_shapes=True, profile_memory=self.options.memory, with_stack=False)

    def ready(self, profiler: Any) -> None:
        path = os.path.join(self.scratch, "trace.json")
        profiler.export_chrome_trace(path)
        self.exported["path"] = path

    def on_step(self) -> None:
        self.steps += 1
        self.before.before_step(self.steps, self.installed)
        self.usage.at_step(self.steps)
        with quiet_stderr():
            self.profiler.step()
        self.before.after_step(self.steps)
        self._say_where()
        wanted = self.options.warmup + self.options.iterations
        if self.steps >= wanted and "path" in self.exported and not self.options.finish:
            raise CaptureComplete

    def _say_where(self) -> None:
        warmup, active = self.options.warmup, self.options.iterations
        if self.status is None:
            return
        if self.steps < warmup:
            self.status(f"warming up: iteration {self.steps + 1} of {warmup}")
        elif self.steps < warmup + active:
            self.status(f"recording iteration {self.steps - warmup + 1} of {active}")

    def run(self) -> ScriptOutcome:
        """Run the script under the profiler; the hooks come off and
        the profiler stops however it ends."""
        if self.status:
            self.status("warming up" if self.options.warmup
                        else f"recording iteration 1 of {self.options.iterations}")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Pp]rofiler.*")
            self.usage.begin()
            with quiet_stderr():
                self.profiler.start()
            try:
                outcome = run_script(self.options.script, self.options.args,
                                     module=self.options.module)
            finally:
                self.installed.remove()
                if "path" not in self.exported:
                    self.exported["incomplete"] = "1"
                with quiet_stderr():
                    try:
                        self.profiler.stop()
                    # a profiler that never started recording has nothing to stop
                    except Exception:  # noqa: BLE001
                        pass
        outcome.steps = self.steps
        return outcome
