"""Global hooks that mark layers, phases and iterations in an unmodified training script.

Installed before the script runs; they need no change to the user's code:

* every `nn.Module` forward is wrapped in a `daydream.layer::<path>` range, where
  `<path>` is the module's dotted path in its root model (`blocks.2.attn`); a root
  model is named by its class (`TinyTransformer`), so paths read `TinyTransformer.blocks.2.attn`;
* a top-level module call is wrapped in `daydream.phase::forward`, `torch.autograd.backward`
  in `daydream.phase::backward`, each optimizer step in `daydream.phase::optimizer`;
* the end of each step of the first optimizer to step (or each return of the
  user's `--step-fn`) is an iteration boundary, reported to `on_step`.

torch is imported here only; the rest of daydream never needs it.
"""

from __future__ import annotations

import importlib
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from daydream.errors import InputError

LAYER_PREFIX = "daydream.layer::"
PHASE_PREFIX = "daydream.phase::"


@dataclass
class LayerInfo:
    path: str
    type: str
    leaf: bool
    gradient_bytes: int = 0  # the module's own trainable parameters (not its children's), bytes
    # how many tensors they are (DDP's used-parameter map has one entry per tensor)
    gradient_tensors: int = 0
    # the module's own buffers (BatchNorm's running statistics): what DDP broadcasts each step
    buffer_bytes: int = 0
    #: The same bytes by dtype ("float32", "int64", ...): DDP coalesces its broadcasts per dtype.
    buffer_dtypes: dict[str, int] = field(default_factory=dict)
    #: The shapes of those parameters, in the module's order: what a wider model grows
    #: (mapping/parameters.py).
    parameter_shapes: list[list[int]] = field(default_factory=list)

    def as_metadata(self) -> dict[str, Any]:
        return {"type": self.type, "leaf": self.leaf, "gradient_bytes": self.gradient_bytes,
                "gradient_tensors": self.gradient_tensors,
                "buffer_bytes": self.buffer_bytes, "buffer_dtypes": self.buffer_dtypes,
                "parameter_shapes": self.parameter_shapes}


@dataclass
class Hooks:
    """The installed hooks; `remove()` uninstalls them all."""

    on_step: Callable[[], None]
    layers: dict[str, LayerInfo] = field(default_factory=dict)
    _handles: list[Any] = field(default_factory=list)
    _restore: list[Callable[[], None]] = field(default_factory=list)
    _names: Any = None
    _open: list[Any] = field(default_factory=list)
    _depth: int = 0
    _in_backward: int = 0  # > 0 while torch.autograd.backward runs (recomputation is backward work)
    #: what the script has done so far: top-level forward passes,
    #: backward passes and optimizer steps
    seen: dict[str, int] = field(default_factory=lambda: {"forward": 0, "backward": 0,
                                                          "optimizer": 0})
    #: the models' weight and gradient versions (in-place writes) when
    #: the last backward pass ended; None before one
    _versions_after_backward: tuple[int, int, int] | None = None
    #: said once on stderr when iterations end at hand-written weight
    #: updates (see `_updated_by_hand`)
    said_by_hand: bool = False
    _primary_optimizer: int | None = None
    _roots: dict[str, int] = field(default_factory=dict)
    #: the leading dimension of the first tensor a top-level module's forward received, once seen
    leading_size: int | None = None
    #: (length, batch) of the first 3-D input a sequence-first module (batch_first=False: nn.LSTM,
    #: nn.GRU, nn.RNN, nn.MultiheadAttention, nn.Transformer*) received, once seen
    sequence_first: tuple[int, int] | None = None
    _models: Any = None  # weak set of the modules called at the top level (the models)
    _optimizers: Any = None  # weak set of the optimizers that stepped

    @property
    def batch_size(self) -> int | None:
        """The samples per iteration: the leading dimension of the model's input, unless that is the
        length of a sequence a sequence-first module received, whose batch is then its dim 1."""
        if self.sequence_first is not None and self.sequence_first[0] == self.leading_size:
            return self.sequence_first[1]
        return self.leading_size

    def memory_snapshot(self) -> MemorySnapshot:
        """Per device ("cuda:0", "cpu"), the tensors the models, optimizers and script hold now:
        weights (parameters and buffers), gradients, optimizer state and other tensors, each storage
        once; on a GPU also the allocator's allocated and reserved bytes. Taken when the first
        traced iteration begins; see MemorySnapshot."""
        return MemorySnapshot.take(list(self._models or ()), list(self._optimizers or ()))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        for restore in reversed(self._restore):
            restore()
        self._handles.clear()
        self._restore.clear()


class RangeScope(Protocol):
    """A named time range: entered when it opens, exited when it closes."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> Any: ...


def install(on_step: Callable[[], None], step_fn: str | None = None,
            open_range: Callable[[str], RangeScope] | None = None,
            search_path: str | None = None) -> Hooks:
    """Install the global hooks; `on_step` is called at every iteration boundary.

    `search_path` is where the script's own modules are (its folder): a `--step-fn module:function`
    is imported from there, as the script will import it.

    `open_range(name)` makes the scope that marks a layer or phase; the default is
    torch's `record_function` (what torch.profiler records as a user annotation).
    """
    import torch

    if open_range is None:
        from torch.autograd.profiler import record_function as torch_range

        open_range = torch_range
    seen = {"forward": 0, "backward": 0, "optimizer": 0}
    watch = _NoStepNotice(step_fn, seen=seen)

    def stepped() -> None:
        watch.cancel()
        on_step()

    hooks = Hooks(on_step=stepped, seen=seen)
    hooks._restore.append(watch.cancel)
    hooks._names = weakref.WeakKeyDictionary()
    hooks._models, hooks._optimizers = weakref.WeakSet(), weakref.WeakSet()
    _hook_modules(hooks, open_range, step_fn, _is_compiling(torch))
    _hook_optimizers(hooks, open_range, step_fn)
    _hook_backward(hooks, open_range, step_fn)
    if step_fn is not None and ":" in step_fn:
        _wrap_step_fn(step_fn, hooks, search_path)
    return hooks


def _layer_name(hooks: Hooks, module: Any) -> str:
    """The layer path of `module` (its model's class, numbered from the
    second model of a class, then the path); the first time a model is
    seen, every module in it is named and its LayerInfo recorded."""
    known = hooks._names.get(module)
    if known is not None:
        return known
    root = type(module).__name__
    count = hooks._roots.get(root, 0) + 1
    hooks._roots[root] = count
    root_name = root if count == 1 else f"{root}#{count}"
    for path, child in module.named_modules():
        if child in hooks._names:
            continue
        full = f"{root_name}.{path}" if path else root_name
        hooks._names[child] = full
        trainable = _own_trainable(child)
        buffers = _own_buffer_bytes(child)
        hooks.layers[full] = LayerInfo(
            full, type(child).__name__, leaf=not any(True for _ in child.children()),
            gradient_bytes=sum(int(p.numel()) * int(p.element_size()) for p in trainable),
            gradient_tensors=len(trainable), buffer_bytes=sum(buffers.values()),
            buffer_dtypes=buffers, parameter_shapes=[list(p.shape) for p in trainable])
    return hooks._names[module]


def _hook_modules(hooks: Hooks, record_function: Callable[[str], RangeScope], step_fn: str | None,
                  compiling: Callable[[], bool]) -> None:
    """Every module's forward marked as its layer, the outermost one also as the forward phase."""
    from torch.nn.modules import module as module_hooks

    # torch.compile warns that global module hooks fire once more for its wrapper: these are
    # daydream's, not the script's, and the wrapper's extra call is a layer like any other.
    warnings.filterwarnings("ignore",
                            message=r"Using `torch\.compile\(module\)` when there are global hooks")

    def before_forward(module: Any, args: Any) -> None:
        if compiling():
            # inside torch.compile's tracing: a marker there would break the compile (and never run)
            return
        scopes = _forward_phase(hooks, module, args, record_function, step_fn)
        if hooks.sequence_first is None and getattr(module, "batch_first", True) is False:
            hooks.sequence_first = _sequence_and_batch(args)
        scopes.append(record_function(LAYER_PREFIX + _layer_name(hooks, module)))
        for scope in scopes:
            scope.__enter__()
        hooks._open.append(scopes)
        hooks._depth += 1

    def after_forward(module: Any, args: Any, output: Any) -> None:
        if compiling() or not hooks._open:  # compiling first: dynamo would guard on what it reads
            return
        hooks._depth -= 1
        for scope in reversed(hooks._open.pop()):
            scope.__exit__(None, None, None)

    hooks._handles.append(module_hooks.register_module_forward_pre_hook(before_forward))
    hooks._handles.append(
        module_hooks.register_module_forward_hook(after_forward, always_call=True))


def _forward_phase(hooks: Hooks, module: Any, args: Any,
                   record_function: Callable[[str], RangeScope],
                   step_fn: str | None) -> list[RangeScope]:
    """The forward phase's scope when `module` is an outermost forward
    (none otherwise); a hand-written update before it ends the iteration,
    and the first one's inputs give the batch's leading size."""
    if hooks._depth or hooks._in_backward:
        return []
    if step_fn is None and _updated_by_hand(hooks):
        hooks.on_step()
    hooks.seen["forward"] += 1
    hooks._models.add(module)
    if hooks.leading_size is None:
        hooks.leading_size = _leading_dimension(args)
    return [record_function(PHASE_PREFIX + "forward")]


def _hook_optimizers(hooks: Hooks, record_function: Callable[[str], RangeScope],
                     step_fn: str | None) -> None:
    """Every optimizer step marked as the optimizer phase; the first
    optimizer's step ends an iteration."""
    from torch.optim import optimizer as optimizer_hooks

    optimizer_scope: list[Any] = []

    def before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        hooks.seen["optimizer"] += 1
        hooks._optimizers.add(optimizer)
        scope = record_function(PHASE_PREFIX + "optimizer")
        scope.__enter__()
        optimizer_scope.append(scope)

    def after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        if optimizer_scope:
            optimizer_scope.pop().__exit__(None, None, None)
        if hooks._primary_optimizer is None:
            hooks._primary_optimizer = id(optimizer)
        if step_fn is None and id(optimizer) == hooks._primary_optimizer:
            hooks.on_step()

    hooks._handles.append(optimizer_hooks.register_optimizer_step_pre_hook(before_step))
    hooks._handles.append(optimizer_hooks.register_optimizer_step_post_hook(after_step))


def _hook_backward(hooks: Hooks, record_function: Callable[[str], RangeScope],
                   step_fn: str | None) -> None:
    """torch.autograd.backward wrapped to mark the backward phase (restored by Hooks.remove)."""
    import torch

    original_backward = torch.autograd.backward

    def backward(*args: Any, **kwargs: Any) -> Any:
        hooks._in_backward += 1
        if hooks._in_backward == 1:
            # a backward inside a backward (double backward, recomputation) is the same pass
            hooks.seen["backward"] += 1
        try:
            with record_function(PHASE_PREFIX + "backward"):
                return original_backward(*args, **kwargs)
        finally:
            hooks._in_backward -= 1
            if not hooks._in_backward and step_fn is None and not hooks.seen["optimizer"]:
                hooks._versions_after_backward = _parameter_versions(hooks)

    torch.autograd.backward = backward
    hooks._restore.append(lambda: setattr(torch.autograd, "backward", original_backward))


def _parameter_versions(hooks: Hooks) -> tuple[int, int, int]:
    """What in-place writes to the models' weights and gradients change: the
    weights' versions, the gradients' versions and how many gradients are None
    (`p -= lr * p.grad` moves the first; `p.data.add_(...)`, which bypasses
    the version counter, comes with a zero_grad() that moves the others)."""
    weights = gradients = missing = 0
    for model in list(hooks._models or ()):
        for p in model.parameters():
            weights += p._version
            if p.grad is None:
                missing += 1
            else:
                gradients += p.grad._version
    return weights, gradients, missing


def _updated_by_hand(hooks: Hooks) -> bool:
    """Whether a training step without optimizer.step() just ended: no optimizer has stepped, a
    backward pass ended and the models' weights or gradients were written since (`p -= lr * p.grad`
    under no_grad, `p.data.add_(...)` and zero_grad()), now that the next forward begins. Gradient
    accumulation writes neither between its backward passes."""
    if hooks.seen["optimizer"] or hooks._versions_after_backward is None:
        return False
    updated = _parameter_versions(hooks) != hooks._versions_after_backward
    hooks._versions_after_backward = None  # one boundary per backward pass
    if updated and not hooks.said_by_hand:
        import sys

        hooks.said_by_hand = True
        sys.stderr.write("daydream: the script updates its weights by hand (no optimizer.step()): "
                         "each iteration ends where the next forward pass begins after an update "
                         "(--step-fn FUNCTION to choose otherwise)\n")
        sys.stderr.flush()
    return updated


def watch_script_function(name: str, script: str, hooks: Hooks) -> None:
    """Make every return of the function `name` defined in the script file an iteration boundary.

    The script is not importable before it runs, so this watches returns with
    `sys.setprofile` (slower Python calls while it is installed).
    """
    import os
    import sys

    script_path = os.path.realpath(script)
    # calls of the function under way: a recursive one ends an
    # iteration at its outermost return only
    depth = [0]

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event not in ("call", "return") or frame.f_code.co_name != name:
            return
        if os.path.realpath(frame.f_code.co_filename) != script_path:
            return
        if event == "call":
            depth[0] += 1
            return
        depth[0] = max(0, depth[0] - 1)
        if depth[0] == 0:
            hooks.on_step()

    previous = sys.getprofile()
    sys.setprofile(profiler)
    hooks._restore.append(lambda: sys.setprofile(previous))


def _wrap_step_fn(spec: str, hooks: Hooks, search_path: str | None = None) -> None:
    """Make `module:function` an iteration boundary: each return ends an iteration."""
    import sys

    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise InputError(f"--step-fn {spec!r}: expected module:function (or a function of the "
                         "script), e.g. train:train_step")
    added = search_path is not None and search_path not in sys.path
    if added:
        sys.path.insert(0, str(search_path))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"--step-fn {spec!r}: cannot import {module_name!r} ({exc}) — is it on "
                         "the script's path?") from None
    finally:
        if added:
            sys.path.remove(str(search_path))
    original = getattr(module, function_name, None)
    if not callable(original):
        raise InputError(f"--step-fn {spec!r}: {module_name} has no function {function_name!r}")

    depth = [0]

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        # A recursive step function (the word language model's repackage_hidden) calls itself
        # through this name: only the outermost return ends an iteration.
        depth[0] += 1
        try:
            result = original(*args, **kwargs)
        finally:
            depth[0] -= 1
        if depth[0] == 0:
            hooks.on_step()
        return result

    setattr(module, function_name, wrapped)
    hooks._restore.append(lambda: setattr(module, function_name, original))


def _leading_dimension(args: Any) -> int | None:
    """The size of the first dimension of the first tensor among a
    forward's arguments, if any has one."""
    for value in args if isinstance(args, (tuple, list)) else (args,):
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) >= 1:
            return int(shape[0])
    return None


#: Seconds without any iteration ending before `daydream trace` says why it may never end.
NO_STEP_NOTICE_S = 10.0


class _NoStepNotice:
    """Once, if no iteration has ended `NO_STEP_NOTICE_S` after the hooks went in: a line on stderr
    saying what ends one, so that a script that never calls optimizer.step() (weights updated by
    hand) is not a silent wait."""

    def __init__(self, step_fn: str | None, after_s: float | None = None,
                 seen: dict[str, int] | None = None) -> None:
        import threading

        self.step_fn = step_fn
        self.seen = seen if seen is not None else {}
        self.timer = threading.Timer(NO_STEP_NOTICE_S if after_s is None else after_s, self.say)
        self.timer.daemon = True
        self.timer.start()

    def message(self) -> str:
        waited = f"{self.timer.interval:.0f} s"
        counts = ", ".join(f"{self.seen.get(what, 0):,} {label}" for what, label in
                           (("forward", "forward passes"), ("backward", "backward passes"),
                            ("optimizer", "optimizer steps")))
        seen = f" (seen so far: {counts})" if self.seen else ""
        if self.step_fn:
            return (f"daydream: no iteration has ended in {waited}{seen}: --step-fn {self.step_fn} "
                    "has not returned yet")
        hint = ("the script runs backward passes without optimizer.step(): if it updates its "
                "weights by hand, name the function that runs one step with --step-fn FUNCTION"
                if self.seen.get("backward") else
                "if the script updates its weights by hand, name its step function with --step-fn "
                "FUNCTION")
        return (f"daydream: no iteration has ended in {waited}{seen}: iterations end at "
                f"optimizer.step(), and none has run — {hint}")

    def say(self) -> None:
        import sys

        sys.stderr.write(self.message() + "\n")
        sys.stderr.flush()

    def cancel(self) -> None:
        self.timer.cancel()


def _is_compiling(torch: Any) -> Callable[[], bool]:
    """Whether torch.compile (dynamo) is tracing the code that runs now:
    `torch.compiler.is_compiling` where this torch has it, else never."""
    compiler = getattr(torch, "compiler", None)
    found = getattr(compiler, "is_compiling", None)
    return found if callable(found) else (lambda: False)


def _sequence_and_batch(args: Any) -> tuple[int, int] | None:
    """(length, batch) of the first 3-D tensor among a sequence-first module's arguments ((L, N,
    features)); None where there is none (an unbatched 2-D input)."""
    for value in args if isinstance(args, (tuple, list)) else (args,):
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) == 3:
            return int(shape[0]), int(shape[1])
    return None


def _own_trainable(module: Any) -> list[Any]:
    """A module's own parameters that get gradients (what data parallelism all-reduces)."""
    return [p for p in module.parameters(recurse=False) if p.requires_grad]


def _own_buffer_bytes(module: Any) -> dict[str, int]:
    """Bytes of a module's own buffers by dtype, in the order the
    module lists them (DistributedDataParallel broadcasts them from
    rank 0 before each forward, one coalesced broadcast per dtype)."""
    by_dtype: dict[str, int] = {}
    for buffer in module.buffers(recurse=False):
        dtype = str(buffer.dtype).removeprefix("torch.")
        by_dtype[dtype] = by_dtype.get(dtype, 0) + int(buffer.numel()) * int(buffer.element_size())
    return by_dtype


#: What a memory snapshot counts per device, besides the GPU allocator's own figures.
SNAPSHOT_CATEGORIES = ("weights", "gradients", "optimizer state", "other tensors")


def _held_tensors(models: list[Any], optimizers: list[Any]) -> Iterator[tuple[Any, str]]:
    """(tensor or None, category) of what the models and optimizers hold,
    in the order that decides a shared tensor's category (parameters and
    buffers as weights first), then every other tensor Python holds."""
    import gc

    import torch

    groups = [group.get("params", []) for optimizer in optimizers
              for group in getattr(optimizer, "param_groups", [])]
    parameters = ([p for model in models for p in model.parameters()]
                  + [p for group in groups for p in group])
    yield from ((parameter, "weights") for parameter in parameters)
    yield from ((buffer, "weights") for model in models for buffer in model.buffers())
    yield from ((getattr(parameter, "grad", None), "gradients") for parameter in parameters)
    for optimizer in optimizers:
        for state in getattr(optimizer, "state", {}).values():
            yield from ((value, "optimizer state")
                        for value in (state.values() if isinstance(state, dict) else ()))
    # Every other tensor alive: what the trace will call "before the trace". type(), not
    # isinstance(): some objects (deprecated module proxies) warn when asked for their __class__.
    tensor_type, parameter_type = torch.Tensor, torch.nn.Parameter
    for candidate in gc.get_objects():
        kind = type(candidate)
        if issubclass(kind, tensor_type) and not issubclass(kind, parameter_type):
            yield candidate, "other tensors"


class MemorySnapshot:
    """The tensors the models, optimizers and script hold at one
    moment, by device and category, each storage once.

    `take` looks at them when the first traced iteration begins; `surviving()`, called when that
    iteration has ended, counts only those still alive: what the trace cannot see allocated and does
    not see freed either (a batch or gradients replaced during the iteration are freed inside it,
    where the trace would miss the free).
    """

    def __init__(self) -> None:
        # (weak reference, device, category, bytes)
        self.entries: list[tuple[Any, str, str, int]] = []
        self.gpu: dict[str, dict[str, int]] = {}

    @classmethod
    def take(cls, models: list[Any], optimizers: list[Any]) -> MemorySnapshot:
        """See Hooks.memory_snapshot. A tensor shared by a model and an
        optimizer (its parameters) counts once, as weights; "other tensors" are
        the rest of the tensors Python holds (a dataset in memory, say)."""
        import torch

        snapshot = cls()
        seen: set[tuple[str, int]] = set()
        for tensor, category in _held_tensors(models, optimizers):
            snapshot._add(tensor, category, seen)
        if torch.cuda.is_available():
            for index in range(torch.cuda.device_count()):
                snapshot.gpu[f"cuda:{index}"] = {
                    "allocated": int(torch.cuda.memory_allocated(index)),
                                                 "reserved": int(torch.cuda.memory_reserved(index)),
                                                 **allocator_summary(
                                                     torch.cuda.memory_stats(index))}
        return snapshot

    def _add(self, tensor: Any, category: str, seen: set[tuple[str, int]]) -> None:
        """`tensor`'s storage under `category`, unless a storage
        already counted or no real memory."""
        import torch

        if (not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta"
            or type(tensor).__name__ == "FakeTensor"):
            return  # FakeTensor: torch.compile's stand-in while tracing, holding no memory
        # a DTensor (FSDP2, tensor parallel): this rank's shard is its memory
        local = getattr(tensor, "_local_tensor", None)
        if isinstance(local, torch.Tensor):
            tensor = local
        try:
            storage = tensor.untyped_storage()
            key, size = (str(tensor.device), int(storage.data_ptr())), int(storage.nbytes())
        except (RuntimeError, NotImplementedError):
            # a tensor without storage (sparse, wrapped): its elements
            key, size = ((str(tensor.device), id(tensor)),
                         int(tensor.numel()) * int(tensor.element_size()))
        if key in seen or size <= 0:
            return
        seen.add(key)
        label = ("cpu" if tensor.device.type == "cpu"
                 else f"{tensor.device.type}:{tensor.device.index or 0}")
        try:
            reference: Any = weakref.ref(tensor)
        except TypeError:
            reference = lambda: tensor  # noqa: E731  (cannot be watched: taken as surviving)
        self.entries.append((reference, label, category, size))

    def counts(self, surviving_only: bool) -> dict[str, dict[str, int]]:
        """Per device, bytes per category (of the tensors still alive, with `surviving_only`)."""
        devices: dict[str, dict[str, int]] = {}
        for reference, label, category, size in self.entries:
            entry = devices.setdefault(label, dict.fromkeys(SNAPSHOT_CATEGORIES, 0))
            if not surviving_only or reference() is not None:
                entry[category] += size
        for label, figures in self.gpu.items():
            devices.setdefault(label, dict.fromkeys(SNAPSHOT_CATEGORIES, 0)).update(figures)
        return devices

    def surviving(self) -> dict[str, dict[str, int]]:
        return self.counts(surviving_only=True)


def memory_snapshot(models: list[Any], optimizers: list[Any]) -> dict[str, dict[str, int]]:
    """Everything the models, optimizers and script hold now, per device and category
    (MemorySnapshot.take)."""
    return MemorySnapshot.take(models, optimizers).counts(surviving_only=False)


#: torch.cuda.memory_stats keys -> the names the trace's memory_before stores them under
ALLOCATOR_SUMMARY = {"segment.all.current": "segments",
                     "segment.large_pool.current": "large pool segments",
                     "segment.small_pool.current": "small pool segments",
                     "inactive_split_bytes.all.current": "inactive split bytes"}


def allocator_summary(stats: dict[str, Any]) -> dict[str, int]:
    """The caching allocator's segment summary from torch.cuda.memory_stats(): segments held (large
    and small pool) and the bytes cached in split blocks no tensor uses (fragmentation). Keys the
    allocator does not report are left out."""
    return {name: int(stats[key]) for key, name in ALLOCATOR_SUMMARY.items()
            if isinstance(stats.get(key), (int, float))}


class MemoryBeforeTrace:
    """The `memory_before` a recorded trace carries: when the warm-up ends,
    a snapshot of what exists (the next iteration is the first the trace
    records); once that iteration has ended, what of it is still alive.

    The snapshot walks every object Python holds (tens of milliseconds), so it is
    taken at the step boundary before the profiler begins the recorded iteration
    (`before_step`), where its time lands in no recorded iteration; the survivors
    are counted (cheaply) after the next boundary (`after_step`)."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self._snapshot: MemorySnapshot | None = None
        self._surviving: dict[str, dict[str, int]] = {}

    def before_step(self, steps: int, hooks: Hooks) -> None:
        """Call at each step boundary, before the profiler moves on,
        with the steps taken so far (this one counted)."""
        if self.warmup and steps == self.warmup:
            self._snapshot = hooks.memory_snapshot()

    def after_step(self, steps: int) -> None:
        """Call at each step boundary, after the profiler has moved on."""
        if self._snapshot is not None and steps == self.warmup + 1:
            self._surviving = self._snapshot.surviving()

    def recorded(self) -> dict[str, dict[str, int]] | None:
        """Per device, bytes per category; None without a warm-up (nothing ran before the trace)."""
        return self._surviving if self.warmup else None
