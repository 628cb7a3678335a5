"""Builders for tiny hand-made traces and independent readers of real ones."""

from __future__ import annotations

import gzip
import json
import lzma
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any


def load_raw(path: Path) -> Any:
    """A trace file decoded with the standard library, for independent checks.

    Numbers with a fraction become `Decimal`, exactly as written in the file.
    """
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as handle:  # type: ignore[operator]
        return json.load(handle, parse_float=Decimal)


def copies_per_step(path: Path) -> float:
    """The `aten::_to_copy` calls per ProfilerStep of a torch.profiler trace (.json, .json.gz or .json.xz): the casts a
    run made, counted from the file alone."""
    raw = json.load(lzma.open(path)) if path.suffix == ".xz" else load_raw(path)
    events = [e for e in raw["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if e.get("cat") == "user_annotation" and str(e["name"]).startswith("ProfilerStep#")]
    copies = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::_to_copy"]
    inside = [c for c in copies if any(s["ts"] <= c["ts"] < s["ts"] + s["dur"] for s in steps)]
    return len(inside) / len(steps)


def ns(microseconds: Any) -> int:
    """Exact integer nanoseconds of a µs value as written in a trace."""
    return int((Decimal(microseconds) * 1000).to_integral_value(ROUND_HALF_EVEN))


def write_trace(folder: Path, events: list[dict[str, Any]], name: str = "trace.json", **envelope: Any) -> Path:
    """Write a small Kineto-style trace; gzip it when `name` ends in .gz."""
    document = {"schemaVersion": 1, **envelope, "traceEvents": events}
    data = json.dumps(document).encode()
    path = folder / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


def op(name: str, ts: float, dur: float, ext: int, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": {"External id": ext, **args}}


def runtime(name: str, ts: float, dur: float, correlation: int, ext: int, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": {"External id": ext, "correlation": correlation, "cbid": 211}}


def kernel(name: str, ts: float, dur: float, correlation: int, ext: int, stream: int = 7, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"External id": ext, "correlation": correlation, "device": 0, "stream": stream, **args}}


def annotation(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def bf16_lstm_runs_here() -> bool:
    """Whether this CPU runs nn.LSTM under bf16 autocast: oneDNN builds no bf16 LSTM primitive without AVX-512 (on an
    AVX2 CPU the call raises RuntimeError). Needs torch."""
    import torch

    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.LSTM(4, 4)(torch.zeros(2, 1, 4))
    except RuntimeError:
        return False
    return True
