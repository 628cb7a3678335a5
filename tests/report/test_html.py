"""The HTML report's data and page: box merging, memory downsampling, escaping, no network loads."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daydream.api import replay_job
from daydream.cli import main
from daydream.graph import TaskKind
from daydream.report.html import build_report, data, json_for_script, render_page
from daydream.trace import GPU_ACTIVITY_KINDS
from tests.builders import annotation, kernel, op, runtime, write_trace

HOSTILE = "void evil<float></script><b>bold</b>&amp;<!--x(int)"


def tiny_trace(folder: Path, kernel_name: str = "void gemm<float>(float*)", kernels_per_step: int = 1,
               orphan_in_first: bool = False, steps_us: tuple[float, ...] = (100.0, 100.0)) -> Path:
    """ProfilerSteps on one thread (two of 100 µs unless `steps_us` says); each launches `kernels_per_step`
    0.5 µs kernels on stream 7."""
    events: list[dict[str, Any]] = []
    correlation = 100
    for step, length in enumerate(steps_us):
        base = sum(steps_us[:step])
        events.append(annotation(f"ProfilerStep#{step + 1}", base, length))
        for k in range(kernels_per_step):
            ext = correlation
            events.append(op("aten::mm", base + 5 + k, 0.8, ext))
            events.append(runtime("cudaLaunchKernel", base + 5.1 + k, 0.5, correlation, ext))
            events.append(kernel(kernel_name, base + 6 + k, 0.5, correlation, ext))
            correlation += 1
    if orphan_in_first:  # GPU work whose launch (correlation below every host call's) was before the window
        events.append(kernel("orphan_kernel", 2.0, 1.0, 1, 1))
    return write_trace(folder, sorted(events, key=lambda e: e["ts"]), "tiny.json")


def embedded_document(page: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="daydream-data">(.*?)</script>', page, re.S)
    assert match is not None
    document: dict[str, Any] = json.loads(match.group(1))
    return document


def test_merge_groups_by_hand() -> None:
    start = np.array([0, 1, 2, 10, 100])
    end = np.array([1, 2, 3, 50, 101])
    # 0-2 are short and touch; 10-50 is wider than the resolution; 100 is alone.
    assert data.merge_groups(start, end, 5).tolist() == [0, 0, 0, 1, 2]
    # A group never spans more than the resolution: [0, 5] holds three boxes, the fourth ends at 7.
    assert data.merge_groups(np.array([0, 2, 4, 6]), np.array([1, 3, 5, 7]), 5).tolist() == [0, 0, 0, 1]
    # Short boxes further apart than the resolution stay apart.
    assert data.merge_groups(np.array([0, 20]), np.array([1, 21]), 5).tolist() == [0, 1]


def test_downsample_keeps_the_peak_and_the_ends() -> None:
    times = np.arange(10_000, dtype=np.int64) * 1000
    total = np.random.default_rng(3).integers(0, 1000, size=10_000)
    total[1234] = 5000
    kept = data.downsample_peaks(times, total, 100)
    assert kept.size <= 100
    assert {0, 1234, 9999} <= set(kept.tolist())
    assert np.all(np.diff(kept) > 0)
    assert data.downsample_peaks(times[:50], total[:50], 100).tolist() == list(range(50))


def test_json_for_script_cannot_close_the_block() -> None:
    value = {"name": HOSTILE, "speedup": float("inf")}
    text = json_for_script(value)
    assert not set("<>&") & set(text)
    assert json.loads(text) == {"name": HOSTILE, "speedup": None}


def test_hostile_kernel_name_is_escaped_everywhere(tmp_path: Path) -> None:
    trace = tiny_trace(tmp_path, HOSTILE)
    out = tmp_path / "report.html"
    assert main(["report", str(trace), "-o", str(out)]) == 0
    page = out.read_text()
    assert "<b>" not in page and "</b>" not in page and "<!--x" not in page
    # Three script blocks (error guard, data, code): the name closed none of them early.
    assert page.count("</script>") == 3
    document = embedded_document(page)
    assert HOSTILE in document["timeline"]["names"]
    assert document["inspect"]["top_kernels"][0]["name"] == HOSTILE
    assert "evil&lt;float&gt;&lt;/script&gt;" in page  # the kernels table, escaped


def test_no_network_resources(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(tiny_trace(tmp_path)), "-o", str(out)]) == 0
    page = out.read_text()
    assert not re.search(r"""(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)
    assert not re.search(r"url\(\s*[\"']?\s*(?:https?:)?//", page, re.I)
    assert "@import" not in page and "<link" not in page and "<iframe" not in page
    assert not re.search(r"\bfetch\(|XMLHttpRequest|import\(", page)


def test_box_cap_merges_and_keeps_every_task_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data, "MAX_BOXES_PER_TRACK", 10)
    replays = replay_job(tiny_trace(tmp_path, kernels_per_step=50))
    document = build_report("tiny", replays, [], 0, 0)
    timeline = document["timeline"]
    gpu = [i for i, track in enumerate(timeline["tracks"]) if track["kind"] == "gpu"]
    assert len(gpu) == 1
    # Kernels in the first step's window: all 50 as recorded; as simulated, those the replay put inside it.
    replay = replays[0]
    kernels = np.flatnonzero(replay.graph.tasks["kind"] == TaskKind.KERNEL)
    first = replay.iterations[0]
    start, end = replay.timeline.start_ns[kernels], replay.timeline.end_ns[kernels]
    simulated = int(np.count_nonzero((start < first.simulated_end_ns) & (end > first.simulated_start_ns)))
    fields = len(timeline["fields"])
    for view, expected in zip(timeline["views"], [50, simulated]):
        boxes = np.array(view["boxes"][gpu[0]]).reshape(-1, fields)
        assert 1 <= len(boxes) <= 10
        assert boxes[:, timeline["fields"].index("count")].sum() == expected


def test_the_default_iteration_skips_a_step_with_orphans(tmp_path: Path) -> None:
    replays = replay_job(tiny_trace(tmp_path, orphan_in_first=True))
    trace = replays[0].trace
    gpu = trace.indices(*GPU_ACTIVITY_KINDS)
    assert "orphan_kernel" in {trace.strings[int(n)] for n in trace.name[gpu]}
    assert build_report("tiny", replays, [], 0, None)["iteration"]["name"] == "ProfilerStep#2"
    clean = tmp_path / "clean"
    clean.mkdir()
    assert build_report("tiny", replay_job(tiny_trace(clean)), [], 0, None)["iteration"]["name"] == "ProfilerStep#1"


def test_the_default_iteration_is_the_whole_one_of_median_time(tmp_path: Path) -> None:
    # A short warm-up step first: the median of 35, 100, 120, 98, 101 µs is 100 µs, step 2.
    replays = replay_job(tiny_trace(tmp_path, steps_us=(35.0, 100.0, 120.0, 98.0, 101.0)))
    assert build_report("tiny", replays, [], 0, None)["iteration"]["name"] == "ProfilerStep#2"


def test_page_has_every_section(tmp_path: Path) -> None:
    document = build_report("tiny", replay_job(tiny_trace(tmp_path)), [], 0, 1)
    page = render_page(document)
    for section in ('id="timeline"', 'id="whatif"', 'id="iterations"', 'id="breakdown"', 'id="memory"'):
        assert section in page
    assert document["iteration"]["name"] == "ProfilerStep#2"
    assert [view["title"] for view in document["timeline"]["views"]] == ["measured", "simulated (no --opt)"]


def test_each_whatif_row_carries_its_predicted_memory() -> None:
    import gzip
    import json

    from daydream.api import predict_job
    from tests.conftest import REPO

    path = REPO / "examples" / "loading" / "round-1" / "cnn-workers-0.json.gz"
    raw = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    peak = max(e["args"]["Total Allocated"] for e in raw if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0)
    from daydream.api import predict_memory_for

    rows = [(["amp"], predict_job(path, ["amp"])), (["batch-size:factor=2"], predict_job(path, ["batch-size:factor=2"]))]
    memory = [predict_memory_for([predictions[0].trace], specs) for specs, predictions in rows]
    document = build_report(str(path), replay_job(path), rows, memory=memory)
    memory = {tuple(row["optimizations"]): row["memory"] for row in document["whatif"]}
    doubled = memory[("batch-size:factor=2",)]
    assert [entry["device"] for entry in doubled] == ["cpu"]
    assert doubled[0]["measured_peak_bytes"] == pytest.approx(peak, rel=0.1)  # the file's largest Total Allocated
    assert doubled[0]["predicted_peak_bytes"] > 1.5 * doubled[0]["measured_peak_bytes"]  # twice the activations
    page = render_page(document)
    assert "peak memory (measured → predicted)" in page and page.count("cpu: ") >= 2


def test_a_pthread_id_past_int32_is_shown_unsigned(tmp_path: Path) -> None:
    # Kineto writes a pthread id of 4,047,503,360 as the int32 -247,463,936.
    events = json.loads(tiny_trace(tmp_path).read_text())
    for event in events["traceEvents"]:
        if event.get("tid") == 1:
            event["tid"] = -247463936
    path = tmp_path / "negative.json"
    path.write_text(json.dumps(events))
    document = build_report("negative", replay_job(path), [])
    labels = [track["label"] for track in document["timeline"]["tracks"]]
    assert "thread 4047503360 (pid 1)" in labels and not any("-247463936" in label for label in labels)


def test_the_report_command_fills_the_memory_column(tmp_path: Path) -> None:
    from tests.conftest import REPO

    path = REPO / "examples" / "loading" / "round-1" / "cnn-workers-0.json.gz"
    out = tmp_path / "report.html"
    assert main(["report", str(path), "--opt", "batch-size:factor=2", "-o", str(out)]) == 0
    rows = embedded_document(out.read_text())["whatif"]
    assert rows[0]["memory"][0]["device"] == "cpu"
    assert rows[0]["memory"][0]["predicted_peak_bytes"] > rows[0]["memory"][0]["measured_peak_bytes"]
