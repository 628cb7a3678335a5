"""`daydream check --update`: write this run's values into the `stored:` mappings of the file.

The file is edited as text, not dumped again, so that everything else stays as the user
wrote it: keys, order, comments, quoting, blank lines. A stored value that is already in
the file is replaced where it stands (a comment after it stays); a missing one is added
as a line at the end of its `stored:` block; a check without `stored:` gets a block after
its last line. Only a flow-style mapping (`stored: {speedup: 2.4}`) is rewritten whole,
and comments inside its braces are lost. The result is parsed again and compared with
the values before the file is replaced, atomically.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import yaml

from daydream._files import atomic_output
from daydream.check.expectations import INTEGER_QUANTITIES, Expectations, Values, parse_expectations
from daydream.check.measure import Measurement
from daydream.errors import DaydreamError, InputError

Edit = tuple[int, int, str]  # replace text[start:end] with the string


def update_stored(expectations: Expectations, measurements: list[Measurement]) -> Expectations:
    """Store each measured check's values in the expectations file;
    return the file as now written."""
    path = expectations.path
    try:
        text = path.read_bytes().decode("utf-8")
        mode = path.stat().st_mode & 0o7777
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read it again to update it "
                         f"({getattr(exc, 'strerror', None) or exc})") from None
    values = {m.check.name: stored_form(m.values) for m in measurements}
    rewritten = rewrite_stored(text, values)
    updated = parse_expectations(rewritten, path)
    wrong = [c.name for c in updated.checks if c.name in values
             and any(c.stored.get(k) != v for k, v in values[c.name].items())]
    if wrong:
        raise DaydreamError(f"{path}: could not update the stored values of check '{wrong[0]}' in "
                            "place — the file is unchanged; set them by hand from daydream check "
                            "--json")
    with atomic_output(path) as out:
        out.write(rewritten.encode("utf-8"))
        # the temporary file is private (0600); keep the file's own permissions
        os.fchmod(out.fileno(), mode)
    return updated


def stored_form(values: Values) -> dict[str, float]:
    """The values as the file will hold them: integers for ns and
    bytes, other numbers to 4 decimals."""
    return {key: float(format_number(key, value)) if key not in INTEGER_QUANTITIES else int(value)
            for key, value in values.as_dict().items()}


def format_number(quantity: str, value: float) -> str:
    if quantity in INTEGER_QUANTITIES:
        return str(int(round(value)))
    text = f"{value:.4f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def rewrite_stored(text: str, stored: dict[str, dict[str, float]]) -> str:
    """`text` (an expectations file that loads) with
    `stored[check][quantity]` written into each check's `stored:`."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    checks = _value(root, "checks")
    if not isinstance(checks, yaml.MappingNode):
        raise InputError("no 'checks' mapping to update")
    layout = _Layout(text)
    edits: list[Edit] = []
    for key_node, check_node in checks.value:
        if key_node.value in stored and isinstance(check_node, yaml.MappingNode):
            edits += _check_edits(layout, key_node, check_node, stored[key_node.value])
    for start, end, replacement in sorted(edits, key=lambda e: e[0], reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


@dataclass(slots=True)
class _Layout:
    """Line positions of the text, and its newline convention."""

    text: str

    @property
    def newline(self) -> str:
        return "\r\n" if "\r\n" in self.text else "\n"

    def end_of_line(self, line: int) -> int:
        """The index just after the content of `line` (0-based), before its newline."""
        lines = self.text.splitlines(keepends=True)
        start = sum(len(entry) for entry in lines[:line])
        return start + len(lines[line].rstrip("\r\n"))

    def insert_after(self, line: int, new_lines: list[str]) -> Edit:
        at = self.end_of_line(line)
        return at, at, "".join(self.newline + entry for entry in new_lines)


def _check_edits(layout: _Layout, key: yaml.Node, check: yaml.MappingNode,
                 values: dict[str, float]) -> list[Edit]:
    stored_key, stored = _pair(check, "stored")
    entries = [(name, format_number(name, value)) for name, value in values.items()]
    if check.flow_style:  # `name: {trace: x, ...}`: the whole stored mapping goes in braces
        if stored is None:
            close = check.end_mark.index - 1
            return [(close, close, f", stored: {_flow(entries)}")]
        return [(stored.start_mark.index, stored.end_mark.index, _flow(_merged(stored, entries)))]
    indent = check.value[0][0].start_mark.column
    step = indent - key.start_mark.column if indent > key.start_mark.column else 2
    if stored is None or stored_key is None:
        block = [" " * indent + "stored:",
                 *(f"{' ' * (indent + step)}{name}: {text}" for name, text in entries)]
        return [layout.insert_after(_last_line(check), block)]
    if isinstance(stored, yaml.ScalarNode) and stored.start_mark.index == stored.end_mark.index:
        # `stored:` and nothing
        return [layout.insert_after(stored_key.end_mark.line,
                                    [f"{' ' * (stored_key.start_mark.column + step)}{name}: {text}"
                                     for name, text in entries])]
    if isinstance(stored, yaml.MappingNode) and not stored.flow_style and stored.value:
        return _block_edits(layout, stored, entries)
    return [(stored.start_mark.index, stored.end_mark.index, _flow(_merged(stored, entries)))]


def _block_edits(layout: _Layout, stored: yaml.MappingNode,
                 entries: list[tuple[str, str]]) -> list[Edit]:
    present = {key.value: value for key, value in stored.value}
    edits: list[Edit] = [(present[name].start_mark.index, present[name].end_mark.index, text)
                         for name, text in entries if name in present]
    missing = [(name, text) for name, text in entries if name not in present]
    if missing:
        indent = stored.value[0][0].start_mark.column
        edits.append(layout.insert_after(_last_line(stored), [f"{' ' * indent}{name}: {text}"
                                                              for name, text in missing]))
    return edits


def _merged(stored: yaml.Node, entries: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The stored keys in their order with new values, then the new
    keys; keys not measured now keep their value."""
    new = dict(entries)
    old = ([(k.value, new.pop(k.value, v.value)) for k, v in stored.value]
           if isinstance(stored, yaml.MappingNode) else [])
    return [*old, *new.items()]


def _flow(entries: list[tuple[str, str]]) -> str:
    return "{" + ", ".join(f"{name}: {text}" for name, text in entries) + "}"


def _last_line(node: yaml.Node) -> int:
    """The last line (0-based) with content of `node`: trailing blank
    and comment lines belong to what follows."""
    if isinstance(node, yaml.ScalarNode):
        if node.start_mark.index == node.end_mark.index:
            return -1
        # A block scalar (| or >) ends at the start of the line after its text.
        return node.end_mark.line - 1 if node.end_mark.column == 0 else node.end_mark.line
    if getattr(node, "flow_style", False) or not node.value:
        return int(node.end_mark.line)
    if isinstance(node, yaml.MappingNode):
        return max(max(_last_line(key), _last_line(value)) for key, value in node.value)
    return max(_last_line(item) for item in node.value)


def _pair(mapping: yaml.MappingNode, name: str) -> tuple[yaml.Node | None, yaml.Node | None]:
    for key, value in mapping.value:
        if isinstance(key, yaml.ScalarNode) and key.value == name:
            return key, value
    return None, None


def _value(node: yaml.Node | None, name: str) -> yaml.Node | None:
    return _pair(node, name)[1] if isinstance(node, yaml.MappingNode) else None
