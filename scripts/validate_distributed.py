#!/usr/bin/env python3
"""Distributed what-ifs against real 2-GPU DDP ranks: remove their communication, predict it back.

    python scripts/validate_distributed.py            # prints, writes docs/validation-distributed.md
    python scripts/validate_distributed.py --out -

For each rank of a real DDP job in the corpus: the measured iteration; the prediction
with `no-comm` (the step without communication); `no-comm` then `ddp:world=2` over the
link the device table gives the GPU, and over the bus bandwidth the trace's own NCCL
kernels show (the fastest instance of the largest all-reduce); and, per collective
size, the model's transfer time beside the shortest recorded kernel.
"""

from __future__ import annotations

import sys
from datetime import date
from pathlib import Path

import numpy as np
from _generated import corpus_missing, page_options, publish, scratch_cache

from daydream.api import open_job
from daydream.errors import InputError
from daydream.interconnect import collective_time_ns, interconnect_of_device
from daydream.mapping.collectives import collectives_of
from daydream.simulate.whatif import predict_traces, resolve_device
from daydream.trace import Trace

REPO = Path(__file__).resolve().parents[1]
JOBS = ["hta/nccl_parser_config/nccl_data.json.gz", "hta/df_index_resolver/df_index_resolver.json.gz"]


def observed_bus_bandwidth_gbs(trace: Trace) -> float | None:
    """Bus bandwidth of the fastest instance of the largest all-reduce: 2(n-1)/n · S / t."""
    info = collectives_of(trace)
    world = trace.meta.world_size or 2
    sizes = [(int(b), int(trace.dur_ns[r])) for r, b, op in zip(info.rows, info.message_bytes, info.operations)
             if op == "allreduce" and b > 0]
    if not sizes:
        return None
    largest = max(b for b, _ in sizes)
    fastest = min(d for b, d in sizes if b == largest)
    return 2 * (world - 1) / world * largest / fastest  # bytes per ns = GB/s


def gpu_busy_share(trace: Trace) -> float:
    """GPU work (kernels, copies, sets; communication excluded) over the time of the trace's iterations."""
    from daydream.mapping import find_iterations
    from daydream.trace import EventKind

    iterations = find_iterations(trace)
    span = sum(it.end_ns - it.start_ns for it in iterations)
    rows = trace.indices(EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)
    inside = np.zeros(rows.size, dtype=bool)
    for it in iterations:
        inside |= (trace.ts_ns[rows] >= it.start_ns) & (trace.ts_ns[rows] < it.end_ns)
    return float(trace.dur_ns[rows[inside]].sum()) / span if span else 0.0


def mean_ms(predictions: list, key: str) -> float:
    return float(np.mean([getattr(p, key) for p in predictions])) / 1e6


def trace_rows(corpus: Path, name: str) -> tuple[list[str], list[str]]:
    traces = open_job(corpus / name).traces
    trace = traces[0]
    device, gpu = resolve_device(trace, None)
    link = interconnect_of_device(device.interconnect if device else None)
    observed = observed_bus_bandwidth_gbs(trace)
    rows, notes = [], []
    baseline = predict_traces(traces, ["no-comm"])
    rows.append(f"| {name} | measured (GPU busy {gpu_busy_share(trace):.0%} of the step, communication excluded) | "
                f"{mean_ms(baseline, 'measured_ns'):.2f} ms | |")
    rows.append(f"| {name} | no-comm | {mean_ms(baseline, 'predicted_ns'):.2f} ms | "
                f"{_error(mean_ms(baseline, 'predicted_ns'), mean_ms(baseline, 'measured_ns'))} |")
    if observed and link:
        notes.append(f"{name}: the largest all-reduce's fastest kernel moved {observed:.1f} GB/s of bus bandwidth; the "
                     f"{link.name} preset the device table gives this GPU assumes {link.bus_bandwidth_gbs:g} GB/s "
                     f"({link.bus_bandwidth_gbs / observed:.0f}x more).")
    choices = [(f"ddp:world=2 over {link.name if link else 'the device link'} (device table: {gpu})", "ddp:world=2")]
    if observed:
        choices.append((f"ddp:world=2 at the trace's own {observed:.1f} GB/s", f"ddp:world=2,bandwidth={observed:.3f}"))
    for label, spec in choices:
        try:
            predicted = predict_traces(traces, ["no-comm", spec])
        except InputError as exc:
            notes.append(f"{name}: `{spec}` cannot be predicted: {exc}")
            continue
        rows.append(f"| {name} | {label} | {mean_ms(predicted, 'predicted_ns'):.2f} ms | "
                    f"{_error(mean_ms(predicted, 'predicted_ns'), mean_ms(predicted, 'measured_ns'))} |")
    return rows, notes + collective_rows(trace, link)


def collective_rows(trace: Trace, link: object) -> list[str]:
    info = collectives_of(trace)
    world = trace.meta.world_size or 2
    by_size: dict[tuple[str, int], list[int]] = {}
    for row, size, operation in zip(info.rows.tolist(), info.message_bytes.tolist(), info.operations):
        if size > 0:
            by_size.setdefault((operation, size), []).append(int(trace.dur_ns[row]))
    if not by_size or link is None:
        return []
    lines = ["", f"Collectives of {trace.meta.source.split('/')[-1]} (rank {trace.meta.rank} of {world}): the model's "
             f"transfer time over {link.name} beside the recorded NCCL kernels (which include waiting for the other rank).",  # type: ignore[attr-defined]
             "", "| collective | bytes | kernels | shortest recorded | median recorded | model |", "|---|---:|---:|---:|---:|---:|"]
    for (operation, size), durations in sorted(by_size.items()):
        model = collective_time_ns(operation, size, world, link)  # type: ignore[arg-type]
        lines.append(f"| {operation} | {size:,} | {len(durations)} | {min(durations) / 1e3:.1f} µs | "
                     f"{np.median(durations) / 1e3:.1f} µs | {model / 1e3:.1f} µs |")
    return lines


def _error(predicted_ms: float, measured_ms: float) -> str:
    return f"{(predicted_ms - measured_ms) / measured_ms * 100:+.2f}%"


def markdown(corpus: Path) -> str:
    lines = [
        "# Distributed what-ifs against real DDP ranks",
        "",
        f"Generated by `python scripts/validate_distributed.py` on {date.today().isoformat()}. Each trace is one rank of a",
        "real 2-GPU DDP job. `no-comm` removes its NCCL kernels; `no-comm` + `ddp:world=2` puts data-parallel",
        "communication back from the model (buckets in backward order, the all-reduce volume the removed kernels",
        "carried, the cost model of `daydream/interconnect.py`) and is compared with the measured iteration (mean over",
        "the trace's iterations).",
        "",
        "| trace | prediction | iteration | vs measured |",
        "|---|---|---:|---:|",
    ]
    extra: list[str] = []
    for name in JOBS:
        rows, notes = trace_rows(corpus, name)
        lines += rows
        extra += notes
    reading = [
        "", "## Reading", "",
        "Both ranks are host-bound: their GPUs are busy for well under half of the step (column above), so the",
        "iteration is set by the CPU and communication hides behind it. The measurement says so itself (the step",
        "without its NCCL kernels replays to the same time), and so does the prediction: every row is within a",
        "fraction of a percent whatever the link. These rows are correct but do not test the cost model.",
        "",
        "The collective table does. The shortest recorded all-reduce kernels are an order of magnitude slower than the model over the",
        "NVLink 3 preset the device table gives an A100: the kernels include waiting for the other rank, and NCCL",
        "ran its low-latency protocol (RING_LL in the kernel names), whose bandwidth is a fraction of the link's.",
        "What the model missed is the fabric, not the overlap: where a trace shows its own collectives, pass the",
        "bandwidth they achieved (`ddp:bandwidth=GB/s`, second ddp row) or measure busbw with nccl-tests, rather than",
        "trusting a preset. df_index_resolver's 2,020 NCCL kernels carry no message sizes (a 2022 trace) and the",
        "trace lists no parameters, so `ddp` needs `params=BYTES` there; it is reported without a ddp row.",
    ]
    return "\n".join(lines + [""] + extra + reading) + "\n"


def main() -> int:
    options = page_options(__doc__.splitlines()[0], "validation-distributed.md").parse_args()
    if corpus_missing("validate_distributed", options.corpus):
        return 2
    with scratch_cache():
        text = markdown(options.corpus)
    publish(text, options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
