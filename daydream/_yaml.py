"""YAML from users (expectations, pipelines), read safely and strictly.

PyYAML's safe loader, plus what a hostile or mistyped file needs: a key given twice in
one mapping is an error (not a silent overwrite); a key must be a plain value (not a
list or a mapping); aliases are capped at `MAX_ALIASES` (a "billion laughs" document of
nested aliases expands exponentially as soon as anything walks it); nesting deeper than
Python can construct is an error; files over `MAX_BYTES` are refused before parsing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from daydream.errors import InputError

MAX_ALIASES = 100
MAX_BYTES = 8 * 2**20


class _StrictLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                event = self.peek_event()
                raise yaml.composer.ComposerError(None, None, f"more than {MAX_ALIASES} aliases (*name)", event.start_mark)
        return super().compose_node(parent, index)  # type: ignore[no-any-return]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(None, None, "a key must be a plain value, not a list or a mapping",
                                                        key_node.start_mark)
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_yaml(text: str, source: str | Path) -> Any:
    """The document in `text` (the file `source`); InputError naming the file, line and problem."""
    if len(text) > MAX_BYTES:
        raise InputError(f"{source}: {len(text) / 2**20:.0f} MiB is too large for a YAML file (limit "
                         f"{MAX_BYTES // 2**20} MiB) — is this the right file?")
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: not valid YAML ({_problem(exc)}) — fix the file") from None
    except RecursionError:
        raise InputError(f"{source}: YAML nested too deeply — flatten the file") from None


def _problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"line {mark.line + 1} column {mark.column + 1}: {problem}" if mark is not None else str(problem)
