#!/usr/bin/env python3
"""Benchmark: how fast daydream reads a trace, cold and from its cache, next to HTA.

Each measurement runs in a fresh child process, so that its peak memory (max RSS)
is its own. Times are measured inside the child around the work itself (imports
excluded); the CLI rows time whole `daydream inspect --json` processes.

    python scripts/bench_ingest.py                      # the 216k-event corpus trace
    python scripts/bench_ingest.py --trace my.json.gz --repeat 5
    python scripts/bench_ingest.py --hta-python /path/to/venv/bin/python   # HTA in another env
    python scripts/bench_ingest.py --against /path/to/other/checkout       # cold read and graph build of another
                                                                           # version of daydream, interleaved

HTA (`pip install holistictraceanalysis`) is optional; without it, its rows say so.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"

_DAYDREAM_COLD = """
import json, sys, time
from daydream.api import open_job
from daydream.report.summary import summarize_job
start = time.perf_counter()
job = open_job(sys.argv[1], cache=False)
read = time.perf_counter() - start
summary = summarize_job(job)
total = time.perf_counter() - start
print(json.dumps({"seconds": read, "with_summary": total, "events": sum(t.meta.events_in_file for t in job.traces)}))
"""

_DAYDREAM_COLD_ZLIB = "import zlib\nfrom daydream.trace import sources\n" \
    "sources.inflater = lambda: zlib.decompressobj(wbits=31)\n" + _DAYDREAM_COLD

#: The cold read with the compiled scanner reading every window (its load, once a process, included), and with
#: msgspec reading every window: daydream itself switches to the scanner past `stream.SCAN_FROM` bytes of text.
_DAYDREAM_COLD_SCANNED = "import daydream.trace.kineto.stream as stream\nstream.SCAN_FROM = 0\n" + _DAYDREAM_COLD
_DAYDREAM_COLD_MSGSPEC = "import daydream.trace.kineto.stream as stream\nstream.SCANNER = False\n" + _DAYDREAM_COLD

#: What loading the scanner costs a process: for numba's kernels, numba's own start (the first call of any compiled
#: function, which a command that simulates pays anyway); then the scanner's first call on two events.
_SCANNER_LOAD = """
import json, time
import numpy as np
from daydream.trace.kineto import scan, scanned
start = time.perf_counter()
empty = np.zeros(0, dtype=np.int64)
scan.span_hashes(b"", empty, empty)
numba_start = time.perf_counter() - start
text = bytearray(b'[{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2, '
                 b'"args": {"correlation": 3, "grid": [1, 1, 1]}}, {"ph": "X"}]')
start = time.perf_counter()
scanned.scan_events(text, 1)
print(json.dumps({"seconds": numba_start + time.perf_counter() - start, "numba": numba_start,
                  "implementation": scan.IMPLEMENTATION}))
"""

#: The floor: the same bytes gunzipped (as daydream does: python-isal where installed) and decoded by msgspec into
#: daydream's own typed structs, nothing else.
_BARE_DECODE = """
import json, sys, time
import msgspec
from daydream.trace.kineto.schema import _Envelope, _Event
from daydream.trace.sources import inflater
start = time.perf_counter()
data = open(sys.argv[1], "rb").read()
text = inflater().decompress(data) if data[:2] == b"\\x1f\\x8b" else data
class Typed(_Envelope, kw_only=True):
    traceEvents: list[_Event]
document = msgspec.json.decode(text, type=Typed)
print(json.dumps({"seconds": time.perf_counter() - start}))
"""

_DAYDREAM_CACHED = """
import json, sys, time
from daydream.api import open_job
from daydream.report.summary import summarize_job
start = time.perf_counter()
job = open_job(sys.argv[1], cache=True)
read = time.perf_counter() - start
summarize_job(job)
print(json.dumps({"seconds": read, "with_summary": time.perf_counter() - start}))
"""

#: The graph build of an opened trace (cached), the best of three builds.
_BUILD = """
import json, sys, time
from daydream.api import open_job
from daydream.graph import build_graph
job = open_job(sys.argv[1], cache=True)
times = []
for _ in range(3):
    start = time.perf_counter()
    for trace in job.traces:
        build_graph(trace)
    times.append(time.perf_counter() - start)
print(json.dumps({"seconds": min(times)}))
"""

_HTA = """
import json, sys, time, logging
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
start = time.perf_counter()
TraceAnalysis(trace_dir=sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - start}))
"""


def run_child(python: str, code: str, argument: str, env: dict[str, str], cwd: Path | None = None) -> dict[str, float]:
    """Run `code` in a fresh interpreter (in `cwd`: `python -c` puts it first on the import path); the JSON line it
    prints, plus its wall seconds."""
    start = time.perf_counter()
    done = subprocess.run([python, "-c", code, argument], capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "child failed")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall"] = wall
    return result


def peak_rss_mib(python: str, code: str, argument: str, env: dict[str, str]) -> float:
    """Peak RSS (MiB) of one child run, from the kernel's accounting of that process alone."""
    process = subprocess.Popen([python, "-c", code, argument], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return float("nan")
    return usage.ru_maxrss / 1024


def time_cli(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "daydream", *args], check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is shown")
    parser.add_argument("--hta-python", default=sys.executable, help="interpreter that has holistictraceanalysis")
    parser.add_argument("--no-hta", action="store_true")
    parser.add_argument("--against", type=Path, help="another daydream checkout: its cold read and graph build "
                                                     "measured beside this one's, interleaved")
    options = parser.parse_args()
    trace = options.trace.resolve()
    if not trace.is_file():
        print(f"bench_ingest: {trace}: no such trace file — pass --trace", file=sys.stderr)
        return 2

    cache = Path(tempfile.mkdtemp(prefix="daydream-bench-"))
    env = {**os.environ, "DAYDREAM_CACHE_DIR": str(cache)}
    try:
        cold, bare, cold_zlib, scanned, msgspec_only, load = [], [], [], [], [], []
        for _ in range(options.repeat):  # interleaved, so that a change in the machine's load hits them all
            cold.append(run_child(sys.executable, _DAYDREAM_COLD, str(trace), env))
            bare.append(run_child(sys.executable, _BARE_DECODE, str(trace), env))
            cold_zlib.append(run_child(sys.executable, _DAYDREAM_COLD_ZLIB, str(trace), env))
            scanned.append(run_child(sys.executable, _DAYDREAM_COLD_SCANNED, str(trace), env)["seconds"])
            msgspec_only.append(run_child(sys.executable, _DAYDREAM_COLD_MSGSPEC, str(trace), env)["seconds"])
            load.append(run_child(sys.executable, _SCANNER_LOAD, "", env))
        cold_peak = peak_rss_mib(sys.executable, _DAYDREAM_COLD, str(trace), env)
        against = _against(options, trace, env)
        run_child(sys.executable, _DAYDREAM_CACHED, str(trace), env)  # first cached open writes the cache
        warm = [run_child(sys.executable, _DAYDREAM_CACHED, str(trace), env) for _ in range(options.repeat)]
        shutil.rmtree(cache)
        cache.mkdir()
        cli_first = time_cli(["inspect", "--json", str(trace)], env)
        cli_second = statistics.median(time_cli(["inspect", "--json", str(trace)], env) for _ in range(options.repeat))
        hta_seconds, hta_peak, hta_note = _hta(options, trace)
    finally:
        shutil.rmtree(cache, ignore_errors=True)

    events = int(cold[0]["events"])
    cold_s = statistics.median(r["seconds"] for r in cold)
    bare_s = statistics.median(r["seconds"] for r in bare)
    zlib_s = statistics.median(r["seconds"] for r in cold_zlib)
    cold_summary_s = statistics.median(r["with_summary"] for r in cold)
    warm_s = statistics.median(r["seconds"] for r in warm)
    warm_summary_s = statistics.median(r["with_summary"] for r in warm)
    rows = [
        ("trace", f"{trace} ({trace.stat().st_size / 2**20:.1f} MiB, {events:,} events)"),
        ("daydream cold read+link", f"{cold_s:.3f} s  ({events / cold_s:,.0f} events/s), peak {cold_peak:.0f} MiB"),
        ("bare typed decode (floor)", f"{bare_s:.3f} s: gunzip + msgspec into daydream's structs; daydream cold is "
                                      f"{cold_s / bare_s:.2f}x it"),
        ("daydream cold, zlib gunzip", f"{zlib_s:.3f} s (without python-isal)"),
        ("daydream cold + summary", f"{cold_summary_s:.3f} s"),
        ("daydream cached open", f"{warm_s:.4f} s  ({cold_s / warm_s:.0f}x faster than cold)"),
        ("daydream cached + summary", f"{warm_summary_s:.4f} s  ({cold_summary_s / warm_summary_s:.0f}x faster than cold + summary)"),
        ("CLI inspect, first / second", f"{cli_first:.2f} s / {cli_second:.2f} s (whole processes, imports included)"),
    ]
    rows += _scanner_rows(trace, statistics.median(scanned), statistics.median(msgspec_only),
                          statistics.median(r["seconds"] for r in load),
                          statistics.median(r["numba"] for r in load), str(load[0]["implementation"]))
    for label, (this, other) in against.items():
        rows.append((f"{label}, this / --against", f"{this:.3f} s / {other:.3f} s ({this / other:.2f}x)"))
    if hta_seconds is not None:
        rows.append(("HTA TraceAnalysis parse", f"{hta_seconds:.3f} s, peak {hta_peak:.0f} MiB"))
        rows.append(("HTA / daydream cold", f"{hta_seconds / cold_s:.1f}x time, {hta_peak / cold_peak:.2f}x peak memory"))
    else:
        rows.append(("HTA", hta_note))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    return 0


def _scanner_rows(trace: Path, scanned: float, msgspec_only: float, load: float, numba_start: float,
                  implementation: str) -> list[tuple[str, str]]:
    """The scanner (the implementation daydream uses here: "c" or "numba") against msgspec on this trace, and where
    it starts to pay."""
    megabytes = _decompressed_bytes(trace) / 1e6
    saved = (msgspec_only - (scanned - load)) / megabytes
    pays_from = f"; it pays for its load past {load / saved:,.0f} MB of text" if saved > 0 else ""
    started = (f" ({numba_start:.3f} s of it numba's own start, paid anyway by a command that simulates)"
               if implementation == "numba" else "")
    return [("cold, scanner / msgspec alone", f"{scanned:.3f} s / {msgspec_only:.3f} s, every window read each way "
                                              f"({megabytes:,.0f} MB of text; the scanner in {implementation})"),
            ("scanner load, first call", f"{load:.3f} s a process{started}; it saves {saved * 1e3:.2f} ms a MB"
                                         f"{pays_from}")]


def _decompressed_bytes(trace: Path) -> int:
    with trace.open("rb") as head:
        gzipped = head.read(2) == b"\x1f\x8b"
    with (gzip.open(trace, "rb") if gzipped else trace.open("rb")) as handle:
        return sum(len(block) for block in iter(lambda: handle.read(1 << 24), b""))


def _against(options: argparse.Namespace, trace: Path, env: dict[str, str]) -> dict[str, tuple[float, float]]:
    """Cold read and graph build (median seconds) of this checkout and of `--against`'s, runs interleaved; {} without
    --against."""
    if options.against is None:
        return {}
    other_cache = Path(tempfile.mkdtemp(prefix="daydream-bench-against-"))
    # each version first on the import path, from a folder holding neither
    this = {**env, "PYTHONPATH": str(REPO)}
    other = {**env, "PYTHONPATH": str(options.against.resolve()), "DAYDREAM_CACHE_DIR": str(other_cache)}
    try:
        found: dict[str, tuple[float, float]] = {}
        for label, code in (("cold read+link", _DAYDREAM_COLD), ("graph build", _BUILD)):
            runs: tuple[list[float], list[float]] = ([], [])
            for _ in range(options.repeat):
                runs[0].append(run_child(sys.executable, code, str(trace), this, cwd=other_cache)["seconds"])
                runs[1].append(run_child(sys.executable, code, str(trace), other, cwd=other_cache)["seconds"])
            found[label] = (statistics.median(runs[0]), statistics.median(runs[1]))
        return found
    finally:
        shutil.rmtree(other_cache, ignore_errors=True)


def _hta(options: argparse.Namespace, trace: Path) -> tuple[float | None, float, str]:
    if options.no_hta:
        return None, float("nan"), "skipped (--no-hta)"
    folder = Path(tempfile.mkdtemp(prefix="daydream-bench-hta-"))
    try:
        (folder / trace.name).symlink_to(trace)
        env = dict(os.environ)
        try:
            runs = [run_child(options.hta_python, _HTA, str(folder), env) for _ in range(options.repeat)]
        except RuntimeError as exc:
            return None, float("nan"), f"not measured ({exc}); pip install holistictraceanalysis or pass --hta-python"
        peak = peak_rss_mib(options.hta_python, _HTA, str(folder), env)
        return statistics.median(r["seconds"] for r in runs), peak, ""
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
