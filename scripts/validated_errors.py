#!/usr/bin/env python3
"""The validated errors every prediction's interval is built from, read off the repository's validation pages.

    python scripts/validated_errors.py            # writes daydream/data/validated_errors.json
    python scripts/validated_errors.py --out -    # prints it

Each page's tables give, per row, a what-if and its error against a real run, (predicted - measured) / measured (where
a row lists each round's error, each round is a comparison of its own):

- docs/gpu-validation.md: what-ifs against real runs on an H200 (GPU traces);
- docs/validation-whatif-cpu.md, docs/validation-compile-cpu.md and docs/validation-data-loading.md: against real
  runs on the CPU (CPU traces);
- docs/validation-cross-gpu.md: `gpu:target=` against the same model traced on the other GPU (GPU traces);
- docs/accuracy.md: the replay of untouched traces, per iteration, each rank alone and each multi-rank job with all its
  ranks together (no what-if: "replay").

The file holds, per kind of trace (gpu, cpu) and optimization name, the errors of its rows and the pages they come
from; `daydream/simulate/interval.py` reads it. A test holds the file to this script's output, so that the intervals
cannot drift from the pages.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _generated import write_or_print  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "daydream" / "data" / "validated_errors.json"
#: page -> the kind of trace its rows come from
PAGES = {"docs/gpu-validation.md": "gpu", "docs/validation-whatif-cpu.md": "cpu", "docs/validation-compile-cpu.md": "cpu",
         "docs/validation-data-loading.md": "cpu", "docs/validation-cross-gpu.md": "gpu", "docs/accuracy.md": "any"}
_PERCENT = re.compile(r"^([+-]?\d+(?:\.\d+)?)%$")


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every markdown table of `text`: (header cells, rows of cells)."""
    found: list[tuple[list[str], list[list[str]]]] = []
    lines = text.splitlines()
    for index, line in enumerate(lines[:-1]):
        if line.startswith("|") and re.match(r"^\|[-:| ]+\|$", lines[index + 1].strip()):
            header = _cells(line)
            rows = []
            for row in lines[index + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(_cells(row))
            found.append((header, rows))
    return found


def _cells(line: str) -> list[str]:
    """The cells of a table row; a | inside a code span (a regular expression) does not split."""
    cells, current, in_code = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append(current.strip())
            current = ""
        else:
            current += char
    return [*cells, current.strip()]


def errors_of(page: str, text: str) -> list[tuple[str, float]]:
    """(optimization name, error) of each row of the page's tables that has a what-if and an error."""
    found = []
    for header, rows in tables(text):
        error = next((i for i, name in enumerate(header) if name.startswith("error")), None)
        if error is None:
            continue
        what = header.index("what-if") if "what-if" in header else None
        if what is None and "predicted on" in header:
            name_of = "gpu"
        elif what is None and header[:3] in (["trace", "rank", "iteration"], ["job", "ranks", "rank"]):
            name_of = "replay"  # one rank replayed alone, or with every rank of its job
        elif what is None:
            continue
        rounds = header.index("rounds' errors") if "rounds' errors" in header else None
        for row in rows:
            name = name_of if what is None else row[what].strip("`").partition(":")[0]
            if rounds is not None and rounds < len(row):  # each round's error is a comparison of its own
                values = [_PERCENT.match(part.strip()) for part in row[rounds].split(",")]
                found += [(name, float(v.group(1)) / 100) for v in values if v is not None]
                continue
            value = _PERCENT.match(row[error]) if error < len(row) else None
            if value is not None:
                found.append((name, float(value.group(1)) / 100))
    return found


def collect(repo: Path = REPO) -> dict[str, object]:
    errors: dict[str, dict[str, list[float]]] = {"gpu": {}, "cpu": {}}
    sources: dict[str, dict[str, list[str]]] = {"gpu": {}, "cpu": {}}
    for page, kind in PAGES.items():
        for name, error in errors_of(page, (repo / page).read_text()):
            for into in (["gpu", "cpu"] if kind == "any" else [kind]):
                errors[into].setdefault(name, []).append(round(error, 6))
                if page not in sources[into].setdefault(name, []):
                    sources[into][name].append(page)
    return {"generated_by": "scripts/validated_errors.py", "errors": errors, "sources": sources}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(OUT), help="where to write (- for stdout)")
    options = parser.parse_args()
    text = json.dumps(collect(), indent=1, sort_keys=True) + "\n"
    write_or_print(text, options.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
