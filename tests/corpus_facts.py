"""Facts read straight from the corpus JSON with the standard library, independently of daydream's reader."""

from __future__ import annotations

import gzip
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

GPU_CATEGORIES = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
API_CATEGORIES = {"cuda_runtime", "Runtime", "cuda_driver"}


def documents(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(member name, document) of a trace file, or of every trace in a tar archive, in name order."""
    if path.name.endswith(".tar.gz"):
        with tarfile.open(path) as archive:
            for member in sorted(archive.getmembers(), key=lambda m: m.name):
                if member.isfile() and ".json" in member.name:
                    data = archive.extractfile(member).read()  # type: ignore[union-attr]
                    yield member.name, json.loads(gzip.decompress(data) if member.name.endswith(".gz") else data)
    else:
        yield path.name, json.loads(gzip.decompress(path.read_bytes()))


def gpu_work_ns(document: dict[str, Any], spans_ns: list[tuple[int, int]]) -> list[float]:
    """Per span: the summed durations (ns) of the GPU kernels, copies and sets launched in it.

    A GPU event belongs to the span holding its launching call (same `correlation`), or, without one,
    its own start. Times are the file's µs times x 1000.
    """
    events = document["traceEvents"] if isinstance(document, dict) else document
    launch_us = {}
    for event in events:
        if event.get("cat") in API_CATEGORIES and event.get("ph") == "X":
            correlation = (event.get("args") or {}).get("correlation")
            if correlation is not None:
                launch_us[correlation] = event["ts"]
    totals = [0.0] * len(spans_ns)
    for event in events:
        if event.get("cat") in GPU_CATEGORIES and event.get("ph") == "X":
            at_ns = launch_us.get((event.get("args") or {}).get("correlation"), event["ts"]) * 1000
            for index, (start, end) in enumerate(spans_ns):
                if start <= at_ns < end:
                    totals[index] += event["dur"] * 1000
                    break
    return totals
