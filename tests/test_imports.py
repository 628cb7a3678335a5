"""The import graph of the package: no cycles, and no arrow back up the pipeline.

Every import counts, those inside functions too; only those under `if TYPE_CHECKING:` (annotations, never run) do
not. `from a.b import c` is an arrow to the module `a.b.c` where there is one, else to `a.b`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

from tests.conftest import REPO

PACKAGE = REPO / "daydream"

#: The pipeline from the bottom: a module may import from its own layer and those before it, never after. Helpers
#: first, then the stages in the order data flows through them (DESIGN.md), then the commands.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("daydream", "daydream.errors", "daydream._regex", "daydream._yaml", "daydream._jit", "daydream._heap",
     "daydream._environment", "daydream._memory", "daydream._files", "daydream._notices", "daydream.interconnect",
     "daydream.intervals"),
    ("daydream.trace",),
    ("daydream.devices", "daydream.mapping"),
    ("daydream.graph", "daydream.cost"),
    ("daydream.transforms",),
    ("daydream.simulate",),
    ("daydream.memory",),
    ("daydream.report",),
    ("daydream.ranks",),
    ("daydream.api",),
    ("daydream.check",),
    ("daydream.cli",),
    ("daydream._start", "daydream.__main__"),
)


def _module_name(path: Path, top: Path) -> str:
    parts = path.relative_to(top).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Lines under `if TYPE_CHECKING:`."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def import_graph(package: Path = PACKAGE) -> nx.DiGraph:
    """Modules of `package` and their imports among themselves (edges carry the line of the first import)."""
    files = {_module_name(path, package.parent): path for path in package.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for name, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        skipped = _type_checking_lines(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom) or node.lineno in skipped:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                if target in files and target != name and not graph.has_edge(name, target):
                    graph.add_edge(name, target, line=node.lineno)
    return graph


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest prefix naming `module`'s layer."""
    best, found = -1, -1
    for index, names in enumerate(LAYERS):
        for prefix in names:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), index
    return found


def test_every_module_has_a_layer() -> None:
    assert [m for m in import_graph() if layer_of(m) < 0] == []


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


def test_no_arrow_back_up_the_pipeline() -> None:
    graph = import_graph()
    back = [f"{a}:{data['line']} imports {b}" for a, b, data in graph.edges(data=True) if layer_of(b) > layer_of(a)]
    assert back == [], "\n".join(back)


def test_the_checker_sees_a_cycle_inside_a_function(tmp_path: Path) -> None:
    # p.a imports p.b inside a function, p.b imports p.a: a cycle. p.c imports p.a for annotations only, and p.d
    # takes the submodule p.e by `from p import e`: neither is an arrow to what it does not run.
    files = {"__init__.py": "from p import d\n", "a.py": "def f():\n    from p.b import g\n", "b.py": "import p.a\n",
             "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import p.a\n",
             "d.py": "from p import e\n", "e.py": "from . import a\n"}
    (tmp_path / "p").mkdir()
    for name, text in files.items():
        (tmp_path / "p" / name).write_text(text)
    graph = import_graph(tmp_path / "p")
    assert sorted(graph.edges()) == [("p", "p.d"), ("p.a", "p.b"), ("p.b", "p.a"), ("p.d", "p.e"), ("p.e", "p.a")]
    assert [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1] == [["p.a", "p.b"]]
