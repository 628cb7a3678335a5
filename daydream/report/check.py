"""`daydream check` results (the summary of
`daydream.check.summarize_check`) as a rich table and as JUnit XML."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from typing import Any

from rich.console import Console
from rich.text import Text

from daydream._files import write_atomically
from daydream.report.console import format_bytes, format_ns
from daydream.report.table import Table


def format_quantity(value: float | None, unit: str) -> str:
    """A measured or stored value in its unit: 2.409x, 32.7 ms, 5.6 MiB, 0.21%."""
    if value is None:
        return "—"
    if unit == "ns":
        return format_ns(value)
    if unit == "bytes":
        return format_bytes(int(value))
    if unit == "%":
        return f"{value:.2f}%"
    return f"{value:.3f}x"


def describe_limit(bound: dict[str, Any]) -> str:
    """`≥ 2.350x`, `≤ 6.0 MiB`, `≤ 35.9 ms (stored +10%)`."""
    text = f"{'≤' if bound['at_most'] else '≥'} {format_quantity(bound['limit'], bound['unit'])}"
    if bound["relative_to_stored"] and bound["previous"]:
        text += f" (stored {(bound['limit'] / bound['previous'] - 1) * 100:+.3g}%)"
    return text


def describe_miss(bound: dict[str, Any]) -> str:
    """How far the value is past the limit: `0.041x (1.7%) under`, `1.2 MiB (20.0%) over`."""
    difference = abs(bound["value"] - bound["limit"])
    amount = format_quantity(difference, bound["unit"])
    share = f" ({bound['beyond'] * 100:.1f}%)" if bound["beyond"] is not None else ""
    return f"{amount}{share} {'over' if bound['at_most'] else 'under'}"


def render_check(summary: dict[str, Any], console: Console) -> None:
    """The broken bounds (or, when all hold, every bound) as one table, and a one-line verdict."""
    rows = [(check, bound) for check in summary["checks"] for bound in check["bounds"]]
    broken = [(check, bound) for check, bound in rows if not bound["passed"]]
    total = summary["bounds"]
    # The heading is a line of its own: as a table title it would be
    # wrapped to the table's width (a long path).
    if broken:
        console.print(Text(f"{len(broken)} of {total} bounds broken in {summary['expectations']}",
                           style="bold"))
        console.print(_table(broken, with_miss=True))
    else:
        console.print(Text(f"{summary['expectations']}: every bound holds", style="bold"))
        console.print(_table(rows, with_miss=False))
    if summary["updated"]:
        console.print(Text(f"stored values updated in {summary['expectations']} "
                           f"({len(summary['checks'])} checks)", style="bold"))
        if broken:
            console.print(Text("the bounds above are broken whatever is stored: change the code or "
                               "the limits", style="yellow"))
    elif broken:
        console.print(Text(f"{len(broken)} of {total} bounds broken", style="bold red")
                      + Text(" — if the change is intended: daydream check "
                             f"{summary['expectations']} --update (or edit the limits)",
                             style="dim"))
    else:
        checks = len(summary["checks"])
        console.print(Text(f"{_count(total, 'bound')} in {_count(checks, 'check')} hold",
                           style="bold green"))


def _table(rows: list[tuple[dict[str, Any], dict[str, Any]]], with_miss: bool) -> Table:
    table = Table()
    for header in ("check", "bound", "limit", "now", "stored", *(("by",) if with_miss else ())):
        table.add_column(header, justify="left" if header in ("check", "bound") else "right",
                         overflow="fold")
    for check, bound in rows:
        style = "bold red" if not bound["passed"] else ""
        cells = [check["name"], bound["bound"], describe_limit(bound),
                 Text(format_quantity(bound["value"], bound["unit"]), style=style),
                 format_quantity(bound["previous"], bound["unit"])]
        if with_miss:
            cells.append(Text(describe_miss(bound), style=style))
        table.add_row(*cells)
    return table


def write_junit(path: str | os.PathLike[str], summary: dict[str, Any]) -> None:
    """One <testsuite> in a <testsuites> root, one <testcase> per check
    and bound; broken bounds carry a <failure>.

    `classname` is the check, `name` the bound, `time` the check's measuring time shared among its
    bounds. Written atomically.
    """
    checks = summary["checks"]
    seconds = sum(check["seconds"] for check in checks)
    attributes = {"name": f"daydream check {summary['expectations']}",
                  "tests": str(summary["bounds"]), "failures": str(summary["broken"]),
                  "errors": "0", "skipped": "0", "time": f"{seconds:.3f}"}
    root = ET.Element("testsuites", attributes)
    suite = ET.SubElement(root, "testsuite", attributes)
    for check in checks:
        share = check["seconds"] / max(1, len(check["bounds"]))
        for bound in check["bounds"]:
            case = ET.SubElement(suite, "testcase",
                                 {"classname": check["name"], "name": bound["bound"],
                                  "time": f"{share:.3f}"})
            line = (f"{bound['quantity']} {format_quantity(bound['value'], bound['unit'])}, limit "
                    f"{describe_limit(bound)}, stored "
                    f"{format_quantity(bound['previous'], bound['unit'])}")
            if not bound["passed"]:
                failure = ET.SubElement(case, "failure", {"message": f"{check['name']}: "
                                                          f"{bound['bound']} broken: {line}",
                                                           "type": "BoundBroken"})
                failure.text = (f"{line}; {describe_miss(bound)} (trace {check['trace']}, what-ifs "
                                f"{' + '.join(check['whatif']) or 'none'})")
            ET.SubElement(case, "system-out").text = line
    ET.indent(root)
    write_atomically(path, ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
