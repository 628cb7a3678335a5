"""The tensors autograd saves for backward in each host op: what checkpointing's hooks handle.

`torch.utils.checkpoint` (use_reentrant=False) installs saved-tensor hooks around a checkpointed
call: each tensor an op saves for backward goes through a Python pack hook in forward, and in
backward through an unpack hook and, in the recomputation, a second pack. Its host cost therefore
grows with the tensors the call's ops save, beside a fixed part per call (cost/host.py records
both).

Autograd saves at the level of the ops that have a derivative formula of their own; a composite op
(`aten::linear`, `aten::conv2d`, `aten::gru`...) saves nothing itself, its recorded children do. So
the tensors a host op saves are those of the outermost ops under it (itself included) that
`saved_per_op()` lists, where autograd recorded them (an op with a sequence number, in a trace that
records them; an op run under no_grad has none and saves nothing). An op that is not listed and has
no child ops is not known: it counts as saving nothing, and `SavedTensors.unknown` says how many
such ops there were. The table counts every float input as requiring grad: where one does not
(dropout's mask in its `aten::mul`), the op saves less than it says.

    saved = saved_tensors_of(trace, rows)   # per row of `rows` (top-level host ops)
    saved.tensors, saved.unknown, saved.last_pack_ns

Autograd saves an op's inputs before the op runs and its results after (`saves_result()`: the ops
whose formula saves one). `last_pack_ns` is, per row, the recorded moment its last saving op packed
its last tensor: that op's end where it saves a result, its start where it saves only inputs. Here
every listed op that saves and that autograd recorded counts, however deep: a composite op torch
lists (`aten::max_pool2d`, its input) runs on the CPU as a child that saves more after its kernel
(`max_pool2d_with_indices`, its indices), and a linear packs where its matrix multiply starts.
torch.utils.checkpoint (use_reentrant=False, early stop: torch's default) ends a call's
recomputation there, before the kernel of a last matrix multiply and without the ops after it (a
residual add), which save nothing.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from daydream.mapping.linking import innermost_enclosing
from daydream.trace import EventKind, Trace

#: Where the table of tensors saved per op lies (`python scripts/saved_tensors.py` writes it).
_TABLE = "saved_tensors.json"


@functools.cache
def _table() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(resources.files("daydream.data").joinpath(_TABLE)
                                        .read_text())
    return loaded


def saved_per_op() -> dict[str, int]:
    """Op name -> the tensors autograd saves for backward in it, every float input requiring grad,
    as torch 2.13 defines and counts them (daydream/data/saved_tensors.json)."""
    tensors: dict[str, int] = _table()["tensors"]
    return tensors


@functools.cache
def saves_result() -> frozenset[str]:
    """The ops whose derivative formula saves one of their results (torch 2.13)."""
    return frozenset(_table()["results"])


@dataclass(slots=True, frozen=True)
class SavedTensors:
    """Per row asked about: the tensors its ops save, its ops the table does not know, whether
    autograd recorded any op of its (False: its top-level op ran whole under no_grad), and when its
    last saving op packed its last tensor (trace ns; -1 where it saves none)."""

    tensors: np.ndarray
    unknown: np.ndarray
    recorded: np.ndarray
    last_pack_ns: np.ndarray


def saved_tensors_of(trace: Trace, rows: np.ndarray) -> SavedTensors:
    """The tensors saved for backward under each of `rows`: host tasks, each a top-level CPU op, or
    an API call (a launch) whose top-level op's tensors go to the first of its calls in `rows`."""
    rows = np.asarray(rows, dtype=np.int64)
    tensors = np.zeros(rows.size, dtype=np.int64)
    unknown = np.zeros(rows.size, dtype=np.int64)
    last_pack = np.full(rows.size, -1, dtype=np.int64)
    ops = trace.indices(EventKind.CPU_OP)
    if rows.size == 0 or ops.size == 0:
        return SavedTensors(tensors, unknown, np.ones(rows.size, dtype=bool), last_pack)
    parents = innermost_enclosing(trace, ops, ops)
    top_level = ops[parents < 0]
    top = np.where(np.isin(rows, ops), rows, innermost_enclosing(trace, top_level, rows))
    # each top-level op once: at the first of `rows` it is (or encloses)
    order = np.lexsort((trace.ts_ns[rows], top))
    first = order[np.r_[True, top[order][1:] != top[order][:-1]]]
    first = first[top[first] >= 0]
    table = saved_per_op()
    per_name = np.array([table.get(name, -1) for name in trace.strings], dtype=np.int64)
    saves_a_result = np.array([name in saves_result() for name in trace.strings], dtype=bool)
    listed = per_name[trace.name[ops]] >= 0
    # the outermost listed ops: what they call runs below autograd
    under_listed = innermost_enclosing(trace, ops[listed], ops) >= 0
    has_children = np.isin(ops, parents[parents >= 0])
    sequence = trace.sequence[ops]
    # an op autograd recorded carries a sequence number; one run under no_grad saves nothing
    recorded = sequence >= 0 if (sequence >= 0).any() else np.ones(ops.size, dtype=bool)
    counted = ops[listed & ~under_listed & recorded]
    unlisted = ops[~listed & ~under_listed & ~has_children & recorded]
    for found, into, values in ((counted, tensors, per_name[trace.name[counted]]),
                                (unlisted, unknown, np.ones(unlisted.size, dtype=np.int64))):
        at = _position_of_owner(trace, top[first], found)
        np.add.at(into, first[at[at >= 0]], values[at >= 0])
    # the last pack: of every listed op that saves and that autograd recorded, at any depth, since a
    # composite that torch lists (aten::max_pool2d) can run as a child that saves its result
    # (max_pool2d_with_indices, its indices) after its kernel
    saving = ops[listed & recorded & (per_name[trace.name[ops]] > 0)]
    packed = np.where(saves_a_result[trace.name[saving]], trace.end_ns[saving], trace.ts_ns[saving])
    at = _position_of_owner(trace, top[first], saving)
    np.maximum.at(last_pack, first[at[at >= 0]], packed[at >= 0])
    # a row outside any op, or in a trace that records no sequence numbers, is taken as recorded
    graded = ops[recorded]
    owners = np.where(np.isin(graded, top_level), graded,
                      innermost_enclosing(trace, top_level, graded))
    return SavedTensors(tensors, unknown, (top < 0) | np.isin(top, owners[owners >= 0]), last_pack)


def _position_of_owner(trace: Trace, tops: np.ndarray, found: np.ndarray) -> np.ndarray:
    """Per row of `found`, the position in `tops` (top-level ops) of itself or of the one
    enclosing it (-1: none)."""
    owner = np.where(np.isin(found, tops), found, innermost_enclosing(trace, tops, found))
    order = np.argsort(tops, kind="stable")
    at = np.minimum(np.searchsorted(tops[order], owner), tops.size - 1)
    return np.where(tops[order][at] == owner, order[at], -1)
