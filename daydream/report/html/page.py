"""The report document (see `daydream.report.html.build_report`) as one self-contained HTML page.

Tables are rendered here, every trace-derived string escaped; the timeline and memory
charts are drawn in the browser by `page.js` from the document, which is embedded as
JSON in a `<script type="application/json">` block with `<`, `>` and `&` written as
`\\u003c`, `\\u003e` and `\\u0026`, so no name can close the block. The page loads nothing
from the network: its CSS and JS are inlined from this package's data files.
"""

from __future__ import annotations

import html
import json
import math
import re
from importlib import resources
from typing import Any

from daydream.mapping.attribution import layer_label
from daydream.memory import CATEGORIES
from daydream.report.console import format_bytes, format_ns, relative_change, short_kernel_name
from daydream.simulate.bound import bound_line


class Markup(str):
    """HTML that is already safe (built here from escaped parts); plain `str` cells are escaped."""


def render_page(document: dict[str, Any]) -> str:
    """The HTML page for `document`: tables, chart containers, the
    embedded data and the inlined CSS and JS."""
    body = "\n".join([
        _header(document), _cards(document), _timeline_section(document), _whatif_section(document),
        _iterations_section(document), _breakdown_section(document), _memory_section(document),
        _notes_section(document),
    ])
    parts = {
        "title": html.escape(f"daydream report — {document['source']}"),
        "css": _asset("page.css"),
        "body": body,
        "data": json_for_script(document),
        "js": _asset("page.js"),
    }
    return re.sub(r"\{\{(\w+)\}\}", lambda match: parts[match.group(1)], _asset("page.html"))


def json_for_script(document: Any) -> str:
    """JSON safe inside a `<script>` block: no `<`, `>` or `&` (so no
    `</script>` or `<!--`), no NaN or Infinity."""
    text = json.dumps(_finite(document), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _escape(value: Any) -> str:
    return value if isinstance(value, Markup) else html.escape(str(value))


def _table(headers: list[str], rows: list[list[Any]], css: str = "",
           row_classes: list[str] | None = None) -> Markup:
    """A table; the first column is text, the others numbers (right-aligned)."""
    head = "".join(f'<th class="{"text" if i == 0 else "num"}">{_escape(h)}</th>'
                   for i, h in enumerate(headers))
    lines = []
    for index, row in enumerate(rows):
        cells = "".join(f'<td class="{"text" if i == 0 else "num"}">{_escape(c)}</td>'
                        for i, c in enumerate(row))
        extra = f' class="{row_classes[index]}"' if row_classes and row_classes[index] else ""
        lines.append(f"<tr{extra}>{cells}</tr>")
    body = "".join(lines)
    return Markup(f'<table class="{css}"><thead><tr>{head}</tr></thead>'
                  f'<tbody>{body}</tbody></table>')


def _named(name: str, width: int = 90) -> Markup:
    """A long (kernel, layer) name shortened for the table, the whole name on hover."""
    short = html.escape(short_kernel_name(name, width))
    return Markup(f'<span class="name" title="{html.escape(name)}">{short}</span>')


def _speedup(value: float | None) -> Markup:
    if value is None:
        return Markup("—")
    css = "faster" if value > 1.01 else "slower" if value < 0.99 else ""
    return Markup(f'<span class="{css}">{value:.2f}×</span>')


def _interval(interval: dict[str, Any] | None) -> str:
    """'; interval 0.82–1.05×' (daydream/simulate/interval.py), where the prediction has one."""
    if not interval:
        return ""
    low, high = interval["speedup"]
    return f"; interval {low:.2f}–{high:.2f}×"


# ---------------------------------------------------------------- sections


def _header(document: dict[str, Any]) -> str:
    iteration = document["iteration"]
    rank = "not recorded" if document["rank"] is None else str(document["rank"])
    facts = [
        ("trace", document["source"]),
        ("rank", f"{rank} of {len(document['ranks'])} ranks" if len(document["ranks"]) > 1
         else rank),
        ("GPU", ", ".join(document["gpu"]) or "not recorded"),
        ("iterations", f"{len(iteration['names'])} ({iteration['source']})"),
        ("shown", f"{iteration['name']} (--iteration {iteration['index']})"),
        ("what if", " + ".join(document["optimizations"])
         or "nothing (the simulated replay); add --opt to predict"),
    ]
    rows = "".join(f"<dt>{_escape(k)}</dt><dd>{_escape(v)}</dd>" for k, v in facts)
    return (f'<header class="page-header"><h1>daydream report</h1>'
            f'<p class="version">daydream {_escape(document["daydream_version"])}</p><dl '
            f'class="facts">{rows}</dl></header>')


def _cards(document: dict[str, Any]) -> str:
    combined = document["whatif"][-1]
    times = combined["iteration_ns"]
    error = ((times["simulated"] - times["measured"]) / times["measured"] * 100 if times["measured"]
             else 0.0)
    cards = [
        ("measured", format_ns(times["measured"]), "mean iteration, as recorded"),
        ("simulated baseline", format_ns(times["simulated"]), f"replay error {error:+.2f}%"),
        ("predicted", format_ns(times["predicted"]), combined["label"]),
        ("speed-up", _speedup(combined["speedup"]), "simulated baseline ÷ predicted"
         + _interval(combined.get("interval"))),
    ]
    items = "".join(f'<div class="card"><div class="card-label">{_escape(label)}</div><div '
                    f'class="card-value">{_escape(value)}</div><div '
                    f'class="card-note">{_escape(note)}</div></div>'
                    for label, value, note in cards)
    return f'<section class="cards">{items}</section>'


def _timeline_section(document: dict[str, Any]) -> str:
    timeline = document["timeline"]
    legend = "".join(f'<span class="swatch phase-{_escape(p)}"></span>{_escape(p)}'
                     for p in timeline["phases"])
    views = timeline["views"]
    counts = "; ".join(f"{v['title']}: {v['drawn']:,} boxes for {v['tasks']:,} tasks"
                       for v in views)
    resolution = max(v["merge_resolution_ns"] for v in views)
    return f"""<section id="timeline-section">
<h2>Timeline of {_escape(document['iteration']['name'])}</h2>
<p class="hint">The recorded and the predicted iteration, one track per host thread and GPU stream,
aligned at the iteration's start and coloured by phase. Ctrl + wheel or the buttons zoom, drag pans,
double-click zooms in; hover a box for its name.</p>
<div class="tl-toolbar"><button type="button" data-zoom="in">zoom in</button>
<button type="button" data-zoom="out">zoom out</button>
<button type="button" data-zoom="reset">whole iteration</button>
<span class="tl-range" id="tl-range"></span>
<span class="legend">{legend}</span></div>
<div id="timeline" class="timeline" data-tracks="{len(timeline['tracks'])}"></div>
<noscript><p class="warning">The timeline and the memory charts are drawn by JavaScript, which is
off.</p></noscript>
<p class="small">{_escape(counts)}. Neighbouring tasks shorter than
{_escape(format_ns(resolution))} are drawn as one box (hover says how many).</p>
</section>"""


def _whatif_section(document: dict[str, Any]) -> str:
    rows, notes, warnings = [], [], []
    for entry in document["whatif"]:
        times = entry["iteration_ns"]
        bound = entry.get("bound_by")
        throughput = (entry.get("samples_per_s") or {}).get("predicted")
        rows.append([entry["label"], format_ns(times["measured"]), format_ns(times["simulated"]),
                     format_ns(times["predicted"]), _speedup(entry["speedup"]), f"{throughput:,.0f}"
                     if throughput else "—", _memory_cell(entry.get("memory") or []),
                     bound_line(bound, top=3) if bound else ""])
        # a combined row repeats its parts' notes
        notes += [note for note in entry["notes"] if note not in notes]
        warnings += [f"{entry['label']}: {w}" for w in entry.get("warnings", [])]
    table = _table(["optimization", "measured", "simulated baseline", "predicted", "speed-up",
                    "samples/s (predicted)", "peak memory (measured → predicted)", "critical path"],
                   rows, "whatif")
    model = (f'<ul class="notes">{"".join(f"<li>{_escape(note)}</li>" for note in notes)}</ul>'
             if notes else "")
    model = "".join(f'<p class="warning">{_escape(w)}</p>' for w in warnings) + model
    return ('<section id="whatif"><h2>What if</h2><p class="hint">Mean iteration time; the '
            'speed-up compares the prediction with '
            "the simulated baseline (like with like). With several ranks the slowest rank sets "
            f"each time.</p>{table}{model}</section>")


def _memory_cell(devices: list[dict[str, Any]]) -> str:
    """Per device: measured → predicted peak, and whether it fits the
    device where its capacity is known."""
    cells = []
    for entry in devices:
        verdict = ("" if entry.get("fits") is None else " (fits)" if entry["fits"]
                   else " (does not fit)")
        cells.append(f"{entry['device']}: {format_bytes(entry['measured_peak_bytes'])} → "
                     f"{format_bytes(entry['predicted_peak_bytes'])}{verdict}")
    return "; ".join(cells) or "—"


def _iterations_section(document: dict[str, Any]) -> str:
    rank = document["replay"]["ranks"][document["rank_index"]]
    headers = ["iteration", "measured", "simulated", "replay error", "unexplained"]
    predicted: dict[str, int] = {}
    if document["optimizations"]:
        headers.append("predicted")
        whatif_rank = document["whatif"][-1]["ranks"][document["rank_index"]]
        predicted = {it["name"]: it["predicted_ns"] for it in whatif_rank["iterations"]}
    rows, classes = [], []
    for index, it in enumerate(rank["iterations"]):
        unexplained = (f"{it['pinned_on_critical_path'] * 100:.1f}%"
                       if "pinned_on_critical_path" in it else "—")
        row = [it["name"], format_ns(it["measured_ns"]), format_ns(it["simulated_ns"]),
               f"{it['signed_error'] * 100:+.2f}%", unexplained]
        rows.append(row + [format_ns(predicted.get(it["name"]))] if predicted else row)
        classes.append("chosen" if index == document["iteration"]["index"] else "")
    table = _table(headers, rows, "iterations", classes)
    return f'<section id="iterations"><h2>Iterations</h2>{table}</section>'


def _breakdown_section(document: dict[str, Any]) -> str:
    inspect = document["inspect"]
    phases = inspect["phases"]
    total = sum(phases.values()) or 1
    bar = "".join(f'<span class="phase-{_escape(name)}" style="width:{ns / total * 100:.3f}%" '
                  f'title="{_escape(name)} {_escape(format_ns(ns))}"></span>'
                  for name, ns in phases.items() if ns)
    basis = "GPU time" if inspect["attribution"]["basis"] == "gpu" else "CPU op time"
    phase_rows = [[name, format_ns(ns), f"{ns / total:.0%}"] for name, ns in phases.items()]
    parts = [f'<h2>Where the time goes</h2><p class="hint">{_escape(basis)} per iteration (mean), '
             'measured.</p>',
             f'<div class="phase-bar">{bar}</div>', '<div class="columns"><div>',
             _table(["phase", "per iteration", "share"], phase_rows, "phases"), "</div><div>",
             _layers_table(inspect), "</div></div>"]
    combined = document["whatif"][-1]
    if document["optimizations"]:
        parts.append(_moved_tables(combined["ranks"][document["rank_index"]], combined["label"]))
    if inspect["top_kernels"]:
        rows = [[_named(k["name"]), f"{k['count']:,}", format_ns(k["total_ns"]),
                 f"{k['share']:.1%}"] for k in inspect["top_kernels"]]
        parts.append("<h3>Top kernels by GPU time (whole trace)</h3>"
                     + _table(["kernel", "count", "total", "share"], rows, "kernels"))
    return f'<section id="breakdown">{"".join(parts)}</section>'


def _layers_table(inspect: dict[str, Any]) -> str:
    layers = inspect["layers"]
    if not layers:
        return ('<p class="small">No layers found: the trace has no module spans or layer markers '
                '(daydream trace records them).</p>')
    total = inspect["layer_total_ns"] or 1
    rows = [[_named(layer_label(layer), 70), format_ns(layer["forward_ns"]),
             format_ns(layer["backward_ns"]),
             f"{(layer['forward_ns'] + layer['backward_ns']) / total:.1%}"] for layer in layers]
    return ("<h3>Top layers (exclusive, per "
            f"iteration)</h3>{_table(['layer', 'forward', 'backward', 'share'], rows, 'layers')}")


def _moved_tables(rank: dict[str, Any], label: str) -> str:
    phase_rows = [[phase, format_ns(v["baseline_ns"]), format_ns(v["predicted_ns"]),
                   relative_change(v["baseline_ns"], v["predicted_ns"])]
                  for phase, v in rank["phases"].items() if v["baseline_ns"] or v["predicted_ns"]]
    html_parts = [f"<h3>Work per phase under {_escape(label)} (per iteration)</h3>",
                  _table(["phase", "baseline", "predicted", "change"], phase_rows, "phases")]
    if rank["layers"]:
        layer_rows = [[_named(layer["name"], 70), format_ns(layer["baseline_ns"]),
                       format_ns(layer["predicted_ns"]),
                       relative_change(layer["baseline_ns"], layer["predicted_ns"])]
                      for layer in rank["layers"]]
        html_parts += ["<h3>Layers that moved most</h3>",
                       _table(["layer", "baseline", "predicted", "change"], layer_rows, "layers")]
    return '<div class="moved">' + "".join(html_parts) + "</div>"


def _memory_section(document: dict[str, Any]) -> str:
    devices = document["memory"]["summary"]["devices"]
    if not devices:
        return ('<section id="memory"><h2>Memory</h2><p class="small">This trace has no [memory] '
                'events — record with '
                "profile_memory=True (daydream trace does).</p></section>")
    series = {entry["device"]: index for index, entry in enumerate(document["memory"]["series"])}
    blocks = []
    for device in devices:
        peak = device["peak_allocated_bytes"] or 1
        rows = [[name, format_bytes(device["categories"].get(name, 0)),
                 f"{device['categories'].get(name, 0) / peak:.0%}"]
                for name in CATEGORIES if device["categories"].get(name)]
        reserved = (format_bytes(device["peak_reserved_bytes"]) if device["peak_reserved_bytes"]
                    else "not recorded")
        chart = (f'<div class="memory-chart" data-series="{series[device["device"]]}"></div>'
                 if device["device"] in series else "")
        layers = ""
        if device["top_layers_by_activation_bytes"]:
            layer_rows = [[_named(str(entry["name"]), 70),
                           format_bytes(int(entry["activation_bytes"]))]
                          for entry in device["top_layers_by_activation_bytes"]]
            layers = ("<h4>Layers by activation memory at the peak</h4>"
                      + _table(["layer", "activations"], layer_rows, "layers"))
        blocks.append(
            f'<div class="memory-device"><h3>{_escape(device["device"])}: peak '
            f'{_escape(format_bytes(device["peak_allocated_bytes"]))} allocated, '
            f'{_escape(reserved)} reserved</h3>{chart}<div class="columns"><div><h4>At the '
            f'peak</h4>{_table(["category", "bytes", "share"], rows, "memory")}<p '
            f'class="small">{device["unclassified_share"]:.0%} unclassified; peak from '
            f'{_escape(device["peak_from"])}.</p></div>'
            f"<div>{layers}</div></div></div>"
        )
    return ('<section id="memory"><h2>Memory</h2><p class="hint">Allocated bytes over the whole '
            'trace, by category; the dashed line marks the peak, the shaded band the iteration '
            'shown above.</p>' + "".join(blocks) + "</section>")


def _notes_section(document: dict[str, Any]) -> str:
    notes = document["replay"]["ranks"][document["rank_index"]]["notes"]
    if not notes:
        return ""
    items = "".join(f"<li>{_escape(note)}</li>" for note in notes)
    return f'<section id="notes"><h2>Replay notes</h2><ul class="notes">{items}</ul></section>'
