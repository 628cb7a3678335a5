"""The shapes of each layer's own trainable parameters, as `daydream trace` records them, and what a
wider model makes of them: the `width` what-if's memory model, and its time model's layers that read
the data.

A layer's out size is the axis of its parameters that it writes: a weight's first, a bias's or a
normalization's only one; the second of an embedding's table (its rows are the vocabulary) and of a
transposed convolution's weight (in channels, out channels / groups, kernel...). Its in size, where
it has one, is a weight's other leading axis. The hidden sizes of a choice of layers are their out
sizes; widened, every layer that writes one grows its out axis and every layer that reads one
(after something wrote it: `widened`) its in axis, in the chosen layers or not (the embedding that
writes the blocks' width and the head that reads it), never a kernel's extent.

    recorded = recorded_parameters(trace)                 # path -> LayerParameters
    wider = widened(recorded, layers, chosen_paths, 2.0)  # sizes, writes, reads, ratio
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from daydream.trace import Trace
from daydream.trace.model import recorded_fact

#: Module types whose weight holds what they write on its second axis.
OUT_SECOND = frozenset({"Embedding", "EmbeddingBag", "ConvTranspose1d", "ConvTranspose2d",
                        "ConvTranspose3d", "LazyConvTranspose1d", "LazyConvTranspose2d",
                        "LazyConvTranspose3d"})
#: Module types that read no features (an embedding reads indices).
NO_INPUT = frozenset({"Embedding", "EmbeddingBag"})


@dataclass(frozen=True, slots=True)
class LayerParameters:
    """A layer's module type and the shapes of its own trainable parameters, in its order."""

    type: str
    shapes: tuple[tuple[int, ...], ...]

    def axes(self, shape: tuple[int, ...]) -> tuple[int, int | None]:
        """Of one of this layer's parameters, of `shape`: the axis it writes (`OUT_SECOND`; a
        vector's only one) and the axis it reads (a weight's other leading one; None for a vector
        or an embedding's table)."""
        out = 1 if self.type in OUT_SECOND and len(shape) > 1 else 0
        reads = None if self.type in NO_INPUT or len(shape) <= 1 else 1 - out
        return out, reads

    def out_sizes(self) -> set[int]:
        """The sizes this layer writes: each parameter's out axis."""
        return {shape[self.axes(shape)[0]] for shape in self.shapes if shape}

    def in_sizes(self) -> set[int]:
        """The feature sizes this layer reads: its weights' in axis (none for an embedding, or a
        layer of vectors only)."""
        return {shape[axis] for shape in self.shapes if (axis := self.axes(shape)[1]) is not None}


def recorded_parameters(trace: Trace) -> dict[str, LayerParameters]:
    """Per layer (module path) of a daydream recording, its type and own parameters' shapes; only
    layers whose recording lists them (recordings before the shapes were recorded list none)."""
    layers = recorded_fact(trace, "layers")
    found: dict[str, LayerParameters] = {}
    for path, info in (layers.items() if isinstance(layers, dict) else ()):
        shapes = info.get("parameter_shapes") if isinstance(info, dict) else None
        if isinstance(shapes, list) and all(_is_shape(s) for s in shapes):
            found[str(path)] = LayerParameters(str(info.get("type", "")),
                                               tuple(tuple(s) for s in shapes))
    return found


def _is_shape(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(n, int) and n >= 0 for n in value)


def hidden_sizes(recorded: dict[str, LayerParameters], chosen: Iterable[str]) -> frozenset[int]:
    """The out sizes of the layers `chosen` (paths) and of the layers inside them; never 1."""
    prefixes = list(chosen)
    found: set[int] = set()
    for path, layer in recorded.items():
        if _inside(path, prefixes):
            found |= layer.out_sizes()
    return frozenset(found - {1})


def _inside(path: str, prefixes: list[str]) -> bool:
    return any(path == p or path.startswith(p + ".") for p in prefixes)


@dataclass(frozen=True, slots=True)
class Widened:
    """What widening the chosen layers does to the model's layers: the hidden sizes, the layers
    whose out axis grows (they write a hidden size) and those whose in axis grows (they read one),
    and all parameters' elements after over before (None where none is recorded)."""

    sizes: frozenset[int]
    writes: frozenset[str]
    reads: frozenset[str]
    ratio: float | None


def widened(recorded: dict[str, LayerParameters], order: list[str], chosen: list[str],
            factor: float) -> Widened:
    """The chosen layers (paths; the layers inside them too) `factor` times as wide.

    A layer writes a hidden size where its out size is one. It reads one where its in size is one
    and what it reads has grown: after the first chosen layer has run, always; before it (in
    `order`, the layers in the order the forward first ran them), only where an earlier layer wrote
    that size. So a first layer whose data has as many features as the blocks are wide keeps its
    in features (the MLP's 256 inputs into 256-wide blocks). A layer of vectors only (a norm)
    writes what it reads."""
    sizes = hidden_sizes(recorded, chosen)
    ordered = [p for p in order if p in recorded] + [p for p in recorded if p not in order]
    first = next((i for i, p in enumerate(ordered) if _inside(p, chosen)), len(ordered))
    written: set[int] = set()
    writes, reads = set(), set()
    for index, path in enumerate(ordered):
        layer = recorded[path]
        inputs = layer.in_sizes() or (layer.out_sizes() if _vectors_only(layer) else set())
        read = bool(inputs & sizes) and (index >= first or bool(inputs & written))
        write = read if _vectors_only(layer) else bool(layer.out_sizes() & sizes)
        if read:
            reads.add(path)
        if write:
            writes.add(path)
            written |= layer.out_sizes() & sizes
    before = sum(math.prod(s) for layer in recorded.values() for s in layer.shapes)
    after = sum(grown_elements(s, recorded[p], sizes, factor, p in writes, p in reads)
                for p in recorded for s in recorded[p].shapes)
    return Widened(sizes, frozenset(writes), frozenset(reads), after / before if before else None)


def _vectors_only(layer: LayerParameters) -> bool:
    return bool(layer.shapes) and all(len(s) <= 1 for s in layer.shapes)


def grown_elements(shape: tuple[int, ...], layer: LayerParameters, sizes: frozenset[int],
                   factor: float, writes: bool, reads: bool) -> float:
    """The elements of one of `layer`'s parameters, of `shape`, once its out axis (where the layer
    `writes` a hidden size) and its in axis (where it `reads` one) are `factor` times as large."""
    out_axis, in_axis = layer.axes(shape)
    grown = [n * factor if n in sizes and ((axis == out_axis and writes)
                                           or (axis == in_axis and reads)) else n
             for axis, n in enumerate(shape)]
    return math.prod(grown)


def reading_data(recorded: dict[str, LayerParameters], wider: Widened, chosen: list[str],
                 factor: float) -> dict[str, float]:
    """The layers outside `chosen` that write a hidden size and have as many in features as one,
    but read what nothing widened (the data): per layer, its parameters' elements after over
    before, what its work grows by (its shapes alone would grow its in features too)."""
    found: dict[str, float] = {}
    for path, layer in recorded.items():
        if (_inside(path, chosen) or path not in wider.writes or path in wider.reads
                or not layer.in_sizes() & wider.sizes):
            continue
        before = sum(math.prod(s) for s in layer.shapes)
        after = sum(grown_elements(s, layer, wider.sizes, factor, True, False)
                    for s in layer.shapes)
        found[path] = after / before if before else 1.0
    return found
