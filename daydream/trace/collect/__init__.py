"""Collecting a trace from an unmodified training script (`daydream trace`).

    from daydream.trace.collect import CaptureOptions, capture
    result = capture(CaptureOptions(script="train.py", iterations=3))

Backends: `torch` (torch.profiler: CPU ops, CUDA kernels and runtime calls, memory
events) and `cupti` (NVIDIA's cupti-python activity API, on a GPU). `auto` takes
cupti where it works and torch otherwise. The trace is gzip Chrome-trace JSON
with daydream's layer / phase / iteration markers and a `daydream` metadata block.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import lzma
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daydream._files import atomic_output
from daydream.errors import InputError
from daydream.trace.collect.common import CaptureError, CaptureOptions, Status
from daydream.trace.collect.runner import ScriptOutcome

__all__ = ["BACKENDS", "CaptureError", "CaptureOptions", "CaptureResult", "Status", "capture"]

BACKENDS = ("auto", "torch", "cupti")


@dataclass(slots=True)
class CaptureResult:
    path: Path
    backend: str
    iterations: int
    outcome: ScriptOutcome
    notices: list[str] = field(default_factory=list)


def default_out(script: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("daydream-traces") / f"{Path(script).stem}-{stamp}.json.gz"


def launched_rank() -> int | None:
    """This process's rank when a launcher (torchrun, mpirun via
    torch's variables) started several."""
    try:
        world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    except ValueError:
        return None
    return rank if world > 1 else None


def output_path(options: CaptureOptions) -> tuple[Path, str | None]:
    """Where the trace goes, and a notice when one process of several chose a per-rank name.

    `{rank}` in --out is replaced by the rank. Without it, each rank of a multi-process
    launch writes NAME-rankN.json.gz beside NAME, so that the ranks do not overwrite one
    another; the default is daydream-traces/SCRIPT-ranks/rankN.json.gz, a folder that
    `daydream replay` reads as one job.
    """
    rank = launched_rank()
    if options.out and "{rank}" in options.out:
        return Path(options.out.replace("{rank}", str(rank or 0))), None
    if rank is None:
        return (Path(options.out) if options.out else default_out(options.path)), None
    if not options.out:
        folder = Path("daydream-traces") / f"{Path(options.path).stem}-ranks"
        return (folder / f"rank{rank}.json.gz",
                f"rank {rank} of {os.environ['WORLD_SIZE']}: one file per rank in {folder}/")
    out = Path(options.out)
    suffix = "".join(s for s in out.suffixes[-2:] if s in (".json", ".gz")) or out.suffix
    stem = out.name[: len(out.name) - len(suffix)] if suffix else out.name
    chosen = out.with_name(f"{stem}-rank{rank}{suffix}")
    return (chosen, f"rank {rank} of {os.environ['WORLD_SIZE']}: wrote {chosen.name}, not "
                    f"{out.name} ({{rank}} in --out names them yourself)")


def check_options(options: CaptureOptions) -> None:
    if importlib.util.find_spec("torch") is None:
        raise InputError("daydream trace runs the script under PyTorch, and torch is not "
                         f"installed in this Python ({sys.executable}) — install it (pip install "
                         "torch) in the environment the script runs in")
    if options.module and not options.path:
        raise InputError(f"-m {options.script}: no module of that name (looked from {os.getcwd()}) "
                         "— name a module as python -m would, e.g. -m mypackage.train")
    if not options.module and not os.path.isfile(options.script):
        raise InputError(f"{options.script}: no such script — pass the training script to run, "
                         "e.g. daydream trace train.py")
    if options.iterations < 1:
        raise InputError(f"--iterations {options.iterations}: record at least 1 iteration")
    if options.warmup < 0:
        raise InputError(f"--warmup {options.warmup}: cannot skip a negative number of iterations")
    if options.backend not in BACKENDS:
        raise InputError(f"--backend {options.backend}: choose one of {', '.join(BACKENDS)}")


def choose_backend(requested: str) -> tuple[str, str | None]:
    """(backend to use, a one-line notice or None)."""
    if requested == "torch":
        return "torch", None
    try:
        from daydream.trace.collect import cupti_backend
    except ImportError as exc:  # pragma: no cover - the backend module ships with daydream
        problem: str | None = f"the CUPTI backend cannot load ({exc})"
    else:
        problem = cupti_backend.unavailable_reason()
    if requested == "cupti":
        if problem:
            raise InputError(f"--backend cupti: {problem} — use --backend torch")
        return "cupti", None
    if problem:
        return "torch", f"using torch.profiler ({problem})"
    return "cupti", "using CUPTI (cupti-python)"


def capture(options: CaptureOptions, status: Status | None = None) -> CaptureResult:
    """Run the script, record `iterations` iterations after `warmup`, write the trace."""
    check_options(options)
    backend, notice = choose_backend(options.backend)
    if backend == "cupti":
        from daydream.trace.collect import cupti_backend

        document, recorded, outcome = cupti_backend.record(options, status)
    else:
        from daydream.trace.collect import torch_backend

        document, recorded, outcome = torch_backend.record(options, status)
    if recorded < options.iterations or document is None:
        # The script ended (or never called --step-fn) before enough iterations: the user's to
        # correct, exit 2; a script that failed keeps exit 1, its traceback above the line.
        raise CaptureError(_short_capture_message(options, recorded, outcome),
                           outcome.formatted_error, exit_code=1 if outcome.error is not None else 2)
    out, rank_notice = output_path(options)
    write_trace_document(out, document)
    notices = [notice, rank_notice, uneven_iterations(document, options)]
    return CaptureResult(out, backend, recorded, outcome, [n for n in notices if n])


#: Recorded iterations whose longest is more than this many times the shortest are said to differ.
UNEVEN = 10.0


def uneven_iterations(document: dict[str, Any], options: CaptureOptions) -> str | None:
    """A notice when the recorded iterations (ProfilerStep#N ranges) differ by more than UNEVEN
    times: the boundaries are not one training step each (a --step-fn that is not the step, an
    evaluation pass inside the window)."""
    events = document.get("traceEvents") if isinstance(document, dict) else None
    durations = [float(e["dur"]) for e in events or () if isinstance(e, dict) and e.get("ph") == "X"
                 and str(e.get("name", "")).startswith("ProfilerStep#")
                 and isinstance(e.get("dur"), (int, float))]
    if len(durations) < 2 or min(durations) <= 0 or max(durations) <= UNEVEN * min(durations):
        return None
    ends = f"--step-fn {options.step_fn}" if options.step_fn else "optimizer.step()"
    return (f"the {len(durations)} recorded iterations differ by more than {UNEVEN:.0f}x "
            f"({_us(min(durations))} to {_us(max(durations))}): each should be one training step, "
            f"and they end at {ends} — check that it runs once per step (daydream inspect shows "
            "each iteration)")


def _us(value: float) -> str:
    return (f"{value / 1e6:.3g} s" if value >= 1e6 else f"{value / 1e3:.3g} ms" if value >= 1e3
            else f"{value:.3g} µs")


def _short_capture_message(options: CaptureOptions, recorded: int, outcome: ScriptOutcome) -> str:
    wanted = options.warmup + options.iterations
    seen = outcome.steps
    if options.step_fn and seen == 0 and outcome.error is None:
        return (f"{options.script}: --step-fn {options.step_fn} was never called, so no iteration "
                "ended; no trace written — name the function that runs one training step (FUNCTION "
                "of the script, or MODULE:FUNCTION)")
    if outcome.error is not None:
        why = f"the script failed first: {type(outcome.error).__name__}: {outcome.error}"
    else:
        why = "the script ended first"
    return (f"{options.script}: {why}; saw {seen} iteration(s) of the {wanted} needed "
            f"(--warmup {options.warmup} + --iterations {options.iterations}); no trace written — "
            "run more steps or lower --warmup/--iterations (iterations end at optimizer.step(); "
            "see --step-fn)")


def write_trace_document(path: Path, document: dict[str, Any]) -> None:
    """JSON in xz for a path ending .xz (about a quarter smaller, slower to write), else in gzip;
    written to a temporary file and renamed into place."""
    body = json.dumps(document).encode("utf-8")
    with atomic_output(path) as raw:
        if path.name.endswith(".xz"):
            raw.write(lzma.compress(body, preset=6))
            return
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) as out:
            out.write(body)
