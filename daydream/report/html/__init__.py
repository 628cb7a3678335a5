"""`daydream report`: one self-contained HTML page about a trace and its what-ifs.

    document = build_report(source, replays, whatifs, rank_index=0, iteration=None)
    write_report("report.html", document)

The document is JSON-ready and reuses the other reports' summaries (`summarize_replays`,
`summarize_predictions`, `summarize_memory`, `summarize_trace`); `data.py` adds the
timeline boxes and memory series, `page.py` turns it into HTML, and `page.html`,
`page.css` and `page.js` (package data) are inlined into the page.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from daydream import __version__
from daydream._files import write_atomically
from daydream.errors import InputError
from daydream.mapping import find_iterations
from daydream.memory import analyze_memory
from daydream.report.html.data import (
    measured_run,
    memory_data,
    predicted_window,
    simulated_run,
    timeline_data,
    typical_iteration,
)
from daydream.report.html.page import json_for_script, render_page
from daydream.report.memory import summarize_memory
from daydream.report.replay import summarize_replays
from daydream.report.summary import summarize_trace
from daydream.report.whatif import summarize_predictions
from daydream.simulate import Replay
from daydream.simulate.whatif import Prediction

SCHEMA_VERSION = 1
TOP_LAYERS = 12

__all__ = ["build_report", "choose_iteration", "json_for_script", "render_page", "write_report"]


def build_report(source: str, replays: list[Replay],
                 whatifs: list[tuple[list[str], list[Prediction]]], rank_index: int = 0,
                 iteration: int | None = None,
                 memory: list[list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """The report document of one job.

    `replays` has one replay per rank; `whatifs` one (specs, predictions per rank) per
    row of the what-if table, the last row being the one whose predicted timeline is
    drawn; with no rows the simulated replay is drawn instead. `rank_index`
    picks the rank drawn and broken down; `iteration` the iteration (default:
    the whole one of median time); `memory`, per row, the drawn rank's predicted
    peak per device (`daydream.api.predict_memory_for`; none where not given).
    """
    replay = replays[rank_index]
    trace = replay.trace
    if not replay.iterations:
        raise InputError(f"{source}: no iterations and no work found — is this a training trace?")
    index = typical_iteration(trace, find_iterations(trace)) if iteration is None else iteration
    specs = whatifs[-1][0] if whatifs else []
    memory = memory or [[] for _ in whatifs]
    rows = [_whatif_row(source, row_specs, predictions, rank_index, row_memory)
            for (row_specs, predictions), row_memory in zip(whatifs, memory)]
    rows = rows or [_replay_row(replays)]
    if whatifs:
        prediction = whatifs[-1][1][rank_index]
        assert prediction.graph is not None and prediction.timeline is not None
        window = predicted_window(prediction.graph, prediction.timeline, index)
        predicted = simulated_run(f"predicted: {' + '.join(specs)}", prediction.graph,
                                  prediction.timeline, window)
    else:
        it = replay.iterations[index]
        predicted = simulated_run("simulated (no --opt)", replay.graph, replay.timeline,
                                  (it.simulated_start_ns, it.simulated_end_ns))
    return {
        "schema_version": SCHEMA_VERSION,
        "daydream_version": __version__,
        "source": source,
        "rank": trace.meta.rank,
        "rank_index": rank_index,
        "ranks": [r.trace.meta.rank for r in replays],
        "gpu": trace.gpu_names,
        "optimizations": specs,
        "iteration": {"index": index, "name": replay.iterations[index].name,
                      "names": [it.name for it in replay.iterations],
                      "source": find_iterations(trace)[0].source},
        "whatif": rows,
        "replay": summarize_replays(source, replays),
        "inspect": _inspect(trace),
        "timeline": timeline_data([measured_run(replay, index), predicted]),
        "memory": _memory(source, replay, index),
    }


def choose_iteration(replay: Replay, wanted: str | None) -> int | None:
    """The index of the iteration named or numbered (0 for the first)
    by `wanted`; None for the default."""
    if wanted is None:
        return None
    names = [it.name for it in replay.iterations]
    if wanted in names:
        return names.index(wanted)
    if wanted.lstrip("-").isdigit() and 0 <= int(wanted) < len(names):
        return int(wanted)
    shown = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
    raise InputError(f"--iteration {wanted}: the trace has {len(names)} iterations ({shown}) — "
                     f"give a position from 0 to {len(names) - 1} or a name")


def write_report(path: str | os.PathLike[str], document: dict[str, Any]) -> int:
    """Write the page atomically; returns its size in bytes."""
    data = render_page(document).encode("utf-8")
    write_atomically(path, data)
    return len(data)


def _whatif_row(source: str, specs: list[str], predictions: list[Prediction], rank_index: int,
                memory: list[dict[str, Any]]) -> dict[str, Any]:
    summary = summarize_predictions(source, specs, predictions)
    return {"label": " + ".join(specs), "notes": summary["ranks"][rank_index]["notes"], **summary,
            "memory": [{key: entry.get(key)
                        for key in ("device", "measured_peak_bytes", "predicted_peak_bytes",
                                                        "capacity_bytes", "fits")}
                       for entry in memory]}


def _replay_row(replays: list[Replay]) -> dict[str, Any]:
    """The table row without optimizations: the simulated replay is the prediction."""
    def mean(replay: Replay, key: str) -> int:
        return (int(np.mean([getattr(it, key) for it in replay.iterations])) if replay.iterations
                else 0)

    simulated = max(mean(r, "simulated_ns") for r in replays)
    return {
        "label": "none (simulated replay)",
        "optimizations": [],
        "iteration_ns": {"measured": max(mean(r, "measured_ns") for r in replays),
                         "simulated": simulated, "predicted": simulated},
        "speedup": 1.0,
        "notes": [],
        "ranks": [],
    }


def _inspect(trace: Any) -> dict[str, Any]:
    """Phases, top layers and top kernels, as `daydream inspect` finds them."""
    summary = summarize_trace(trace)
    layers = sorted(summary["layers"],
                    key=lambda layer: -(layer["forward_ns"] + layer["backward_ns"]))
    return {
        "phases": summary["phases"],
        "attribution": summary["attribution"],
        "layer_total_ns": sum(layer["forward_ns"] + layer["backward_ns"] for layer in layers),
        "layers": [layer for layer in layers if layer["forward_ns"]
                   or layer["backward_ns"]][:TOP_LAYERS],
        "top_kernels": summary["top_kernels"],
    }


def _memory(source: str, replay: Replay, index: int) -> dict[str, Any]:
    trace = replay.trace
    memory = analyze_memory(trace)
    origin = trace.span_ns()[0]
    it = replay.iterations[index]
    return {
        "summary": summarize_memory(source, [(trace.meta.rank, memory)]),
        "series": memory_data(memory, origin),
        "iteration_ns": [it.measured_start_ns - origin, it.measured_end_ns - origin],
    }
