"""The HTML report in a real headless browser (chromium --dump-dom).

The page records script errors and console.error calls in #page-errors (data-count); the
tests read that, and count the drawn tracks against the host threads and GPU streams
that have work in the iteration, counted here from the trace's events. Without chromium
the tests are skipped, and fail under CI=true.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daydream.api import open_job
from daydream.cli import main
from daydream.mapping import find_iterations
from daydream.trace import GPU_ACTIVITY_KINDS, EventKind, Trace
from tests.conftest import REPO
from tests.report.test_html import HOSTILE, tiny_trace

EXAMPLE = REPO / "examples" / "traces" / "cnn_v100.json.gz"
WORK_KINDS = [int(k) for k in (EventKind.CPU_OP, EventKind.RUNTIME, EventKind.DRIVER, *GPU_ACTIVITY_KINDS)]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI") == "true":
        pytest.fail("chromium is not on PATH (CI=true requires it): apt-get install chromium")
    pytest.skip("chromium is not on PATH")


class PageFacts(HTMLParser):
    """What the browser drew: tracks per timeline view, recorded errors, memory charts, <b> elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tracks: dict[str, int] = {}
        self.view: str | None = None
        self.error_count: int | None = None
        self.errors: list[str] = []
        self.in_errors = False
        self.rendered_ms: int | None = None
        self.memory_charts = 0
        self.bold = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        if tag == "html" and attributes.get("data-rendered-ms"):
            self.rendered_ms = int(attributes["data-rendered-ms"] or 0)
        elif tag == "section" and "data-view" in attributes:
            self.view = attributes["data-view"]
            self.tracks[self.view or ""] = 0
        elif tag == "div" and "track" in classes and self.view is not None:
            self.tracks[self.view] += 1
        elif tag == "ul" and attributes.get("id") == "page-errors":
            self.error_count = int(attributes.get("data-count") or 0)
            self.in_errors = True
        elif tag == "svg" and (attributes.get("aria-label") or "").startswith("allocated memory"):
            self.memory_charts += 1
        elif tag == "b":
            self.bold += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self.view = None
        elif tag == "ul":
            self.in_errors = False

    def handle_data(self, text: str) -> None:
        if self.in_errors and text.strip():
            self.errors.append(text.strip())


def load(page: Path, profile: Path) -> PageFacts:
    """The page's DOM after its scripts ran, as chromium dumps it."""
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
               f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom", page.as_uri()]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    facts = PageFacts()
    facts.feed(result.stdout)
    assert facts.error_count is not None, "no #page-errors in the dumped page"
    return facts


def tracks_with_work(trace: Trace, start_ns: int, end_ns: int) -> int:
    """Host threads and GPU streams with a CPU op, API call or GPU activity overlapping [start, end)."""
    rows = np.flatnonzero(np.isin(trace.kind, WORK_KINDS))
    begin, finish = trace.ts_ns[rows], trace.end_ns[rows]
    inside = (begin < end_ns) & ((finish > start_ns) | (begin >= start_ns))
    return len(set(trace.track[rows[inside]].tolist()))


def test_example_report_loads_and_draws_every_track(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(EXAMPLE), "--opt", "amp", "--iteration", "2", "-o", str(out)]) == 0
    trace = open_job(EXAMPLE).traces[0]
    iteration = find_iterations(trace)[2]
    expected = tracks_with_work(trace, iteration.start_ns, iteration.end_ns)
    facts = load(out, tmp_path / "profile")
    assert facts.error_count == 0, facts.errors
    assert facts.rendered_ms is not None
    assert facts.tracks == {"measured": expected, "predicted": expected}


def test_largest_corpus_trace_stays_small_and_draws_memory(corpus: Path, manifest: dict[str, Any], tmp_path: Path) -> None:
    # The largest file with at least two profiler steps (the report shows its second iteration).
    stepped = [corpus / key for key, facts in manifest.items() if "::" not in key and len(facts["profiler_steps"]) >= 2]
    largest = max(stepped, key=lambda p: p.stat().st_size)
    out = tmp_path / "report.html"
    assert main(["report", str(largest), "--iteration", "1", "-o", str(out)]) == 0
    assert out.stat().st_size < 3 * 2**20  # docs/report.md promises a few MB at most
    trace = open_job(largest).traces[0]
    iteration = find_iterations(trace)[1]
    expected = tracks_with_work(trace, iteration.start_ns, iteration.end_ns)
    memory = trace.tables.get("memory")
    devices = len({(int(t), int(d)) for t, d in zip(memory["device_type"], memory["device_id"])}) if memory is not None else 0
    facts = load(out, tmp_path / "profile")
    assert facts.error_count == 0, facts.errors
    assert facts.tracks == {"measured": expected, "predicted": expected}
    assert facts.memory_charts == devices


def test_hostile_names_stay_text_in_the_browser(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(tiny_trace(tmp_path, HOSTILE)), "-o", str(out)]) == 0
    facts = load(out, tmp_path / "profile")
    assert facts.error_count == 0, facts.errors
    assert facts.bold == 0  # the name's <b> did not become an element
    assert facts.tracks == {"measured": 2, "predicted": 2}  # one host thread, one stream


@pytest.mark.parametrize("injected", ["<script>null.boom;</script>", "<script>console.error('drawn wrong');</script>"])
def test_the_page_reports_its_own_errors(tmp_path: Path, injected: str) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(tiny_trace(tmp_path)), "-o", str(out)]) == 0
    broken = tmp_path / "broken.html"
    broken.write_text(out.read_text().replace("</body>", injected + "</body>"))
    facts = load(broken, tmp_path / "profile")
    assert facts.error_count == 1
    assert ("boom" in facts.errors[0]) or ("drawn wrong" in facts.errors[0])
