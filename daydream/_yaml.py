"""YAML from users (expectations, pipelines), read safely and strictly.

PyYAML's safe loader, plus what a hostile or mistyped file needs: a key given twice in
one mapping is an error (not a silent overwrite); a key must be a plain value (not a
list or a mapping); aliases are capped at `MAX_ALIASES`, and the document as its aliases expand at
`MAX_NODES` (a "billion laughs" document of nested aliases expands exponentially as soon as anything
walks it, though it takes few aliases); numbers (1e-3 included, as in YAML 1.2) must be finite and
within 64 bits; nesting deeper than Python can construct is an error; files over `MAX_BYTES`
(pure-Python parsing takes seconds per MiB) and anything that is not a regular file (a device, a
FIFO) are refused before parsing.
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from daydream.errors import InputError

MAX_ALIASES = 100
MAX_BYTES = 2**20
# nodes of the document with every alias expanded: a hand-written file has hundreds
MAX_NODES = 250_000
MAX_INTEGER = 2**63 - 1


class _StrictLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                # untyped in types-PyYAML
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(None, None,
                                                  f"more than {MAX_ALIASES} aliases (*name)",
                                                  event.start_mark)
        return super().compose_node(parent, index)

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None and _expanded_size(node) > MAX_NODES:
            raise yaml.composer.ComposerError(None, None, f"more than {MAX_NODES:,} values once "
                                                          "its aliases are "
                                                          "expanded", node.start_mark)
        return node

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        value = super().construct_yaml_int(node)
        if abs(value) > MAX_INTEGER:
            raise yaml.constructor.ConstructorError(None, None,
                                                    f"{node.value[:40]} is out of range (at most "
                                                    f"{MAX_INTEGER:,})", node.start_mark)
        return value

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise yaml.constructor.ConstructorError(None, None,
                                                    f"{node.value[:40]} is not a finite number",
                                                    node.start_mark)
        return value

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(None, None, "a key must be a plain value, "
                                                                    "not a list or a mapping",
                                                        key_node.start_mark)
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
# YAML 1.2's floats as well: 1e-3 and 2E6 are numbers (YAML 1.1, PyYAML's, reads them as strings)
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float",
                                    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|"
                                               r"\.[0-9]+)[eE][-+]?[0-9]+$"), list("-+0123456789."))
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_float)


def _expanded_size(root: yaml.Node) -> int:
    """How many nodes `root` stands for with every alias expanded (a shared node counted each time
    it is used); iterative, and stops counting past MAX_NODES."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if children_done or not children:
            sizes[id(node)] = min(MAX_NODES + 1, 1
                                  + sum(sizes.get(id(child), 0) for child in children))
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def read_yaml_file(path: str | os.PathLike[str], what: str) -> str:
    """The text of the YAML file at `path` (`what` it should be, for the errors): only a regular
    file, at most MAX_BYTES, UTF-8; InputError naming the file otherwise."""
    source = str(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"{source}: no such file — name {what}") from None
    except OSError as exc:
        raise InputError(f"{source}: cannot read ({exc.strerror})") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{source}: is a folder — name {what}")
    if not stat.S_ISREG(mode):
        raise InputError(f"{source}: not a regular file (a device, FIFO or socket) — name {what}")
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{source}: cannot read ({exc.strerror})") from None
    if len(data) > MAX_BYTES:
        raise InputError(f"{source}: over {MAX_BYTES // 2**20} MiB is too large for a YAML file — "
                         f"is this {what}?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{source}: not UTF-8 text — is this {what}?") from None


def load_yaml(text: str, source: str | Path) -> Any:
    """The document in `text` (the file `source`); InputError naming the file, line and problem."""
    if len(text) > MAX_BYTES:
        raise InputError(f"{source}: {len(text) / 2**20:.0f} MiB is too large for a YAML file "
                         f"(limit {MAX_BYTES // 2**20} MiB) — is this the right file?")
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: not valid YAML ({_problem(exc)}) — fix the file") from None
    except RecursionError:
        raise InputError(f"{source}: YAML nested too deeply — flatten the file") from None


def _problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return (f"line {mark.line + 1} column {mark.column + 1}: {problem}" if mark is not None
            else str(problem))
