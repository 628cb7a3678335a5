"""PyTorch's autocast rules, and the casts they insert into a recorded fp32 forward.

torch.autocast decides per op, at the dispatcher, on the first op of its lists that a call reaches
(aten::linear, not the aten::addmm inside it): ops of the *lower* list run in bf16/fp16 (their fp32
floating inputs are cast down, each weight once per forward: autocast caches the cast of a leaf
tensor), ops of the *fp32* list run in fp32 (their reduced inputs are cast up), and every other op
runs in the type of its inputs (an elementwise op of an fp32 and a bf16 tensor promotes to fp32).
Lists as PyTorch documents them ("Autocast Op Reference", torch 2.x), CUDA and CPU.

`plan_casts` follows the type of the activation through one iteration's forward, op by op, and says
which inputs of which op get a cast, and which of those casts autograd runs again, backward, on the
gradient (every cast of a tensor that requires grad: weights, and activations after the first op,
whose input is the data).

    inputs = [((64, 256), "float"), ((512, 256), "float"), ((512,), "float")]
    ops = [ForwardOp(row=1, name="aten::linear", layer=0, inputs=inputs)]
    plan_casts(ops, "cuda")
    # three casts: the input, the weight and the bias; the weight's and bias's again in backward
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from daydream.cost.shapes import FULL, Tensor, elements

_COMMON_LOWER = ("addbmm", "addmm", "baddbmm", "bmm", "conv1d", "conv2d", "conv3d", "conv_tbc",
                 "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "_convolution",
                 "linear", "matmul", "mm", "prelu", "scaled_dot_product_attention")
#: Ops autocast runs in the reduced type, per device type.
LOWER = {
    "cuda": frozenset(f"aten::{op}" for op in (*_COMMON_LOWER, "addmv", "addr", "chain_matmul",
                                               "linalg_multi_dot", "mv", "gru_cell", "lstm_cell",
                                               "rnn_tanh_cell", "rnn_relu_cell")),
    # a oneDNN LSTM layer (what the CPU's aten::lstm calls) and a fused
    # linear-and-activation, as torch 2.x registers them for AutocastCPU
    "cpu": frozenset(f"aten::{op}"
                     for op in (*_COMMON_LOWER, "linalg_vecdot", "_native_multi_head_attention",
                                "mkldnn_rnn_layer", "_addmm_activation")),
}
_COMMON_FP32 = ("binary_cross_entropy", "cdist", "cosine_embedding_loss", "hinge_embedding_loss",
                "huber_loss", "kl_div", "l1_loss", "margin_ranking_loss", "mse_loss",
                "multi_margin_loss", "multilabel_margin_loss", "nll_loss", "nll_loss2d",
                "poisson_nll_loss", "smooth_l1_loss", "soft_margin_loss", "triplet_margin_loss",
                "prod", "cross_entropy_loss")
#: Ops autocast runs in fp32, per device type.
FP32 = {
    "cuda": frozenset(f"aten::{op}" for op in (*_COMMON_FP32, "acos", "asin", "cosh", "erfinv",
                                               "exp", "expm1", "log", "log10", "log2", "log1p",
                                               "reciprocal", "rsqrt", "sinh", "tan", "pow",
                                               "softplus", "layer_norm", "native_layer_norm",
                                               "group_norm", "norm", "frobenius_norm",
                                               "nuclear_norm", "cosine_similarity", "dist", "pdist",
                                               "renorm", "logsumexp", "softmax", "log_softmax",
                                               "cumprod", "cumsum", "sum",
                                               "binary_cross_entropy_with_logits")),
    "cpu": frozenset(f"aten::{op}"
                     for op in (*_COMMON_FP32, "avg_pool3d", "grid_sampler", "polar", "quantile",
                                              "nanquantile", "stft", "trace", "cholesky", "inverse",
                                "lu_solve", "orgqr",
                                              "ormqr", "pinverse", "max_pool3d", "max_unpool2d",
                                "max_unpool3d",
                                              "adaptive_avg_pool3d", "reflection_pad1d",
                                "reflection_pad2d",
                                              "replication_pad1d", "replication_pad2d",
                                "replication_pad3d",
                                              "fft_fft", "fft_ifft", "fft_rfft", "fft_irfft")),
}
#: Inputs that are a module's parameters (cast once per forward and
#: again, as a gradient, in backward), per op.
PARAMETER_INPUTS = {"aten::linear": (1, 2), "aten::conv1d": (1, 2), "aten::conv2d": (1, 2),
                    "aten::conv3d": (1, 2), "aten::conv_transpose1d": (1, 2),
                    "aten::conv_transpose2d": (1, 2), "aten::conv_transpose3d": (1, 2),
                    "aten::_convolution": (1, 2), "aten::conv_tbc": (1, 2), "aten::prelu": (1,),
                    "aten::addmm": (0, 2), "aten::_addmm_activation": (0, 2),
                    # the input-hidden and hidden-hidden weights and their biases
                    "aten::mkldnn_rnn_layer": (1, 2, 3, 4)}
#: Inputs that carry a recurrent state in, per op: cast down where the activation is fp32, as the
#: activation is, but no gradient comes back through them (a state made afresh or detached each
#: step requires none).
STATE_INPUTS = {"aten::mkldnn_rnn_layer": (5, 6)}
#: Inputs made apart from the activation, per op: an attention's additive mask, built from
#: constants or handed in with the data, is fp32 whatever the activation's type, so autocast casts
#: it down at every call; it requires no gradient (nn.MultiheadAttention's causal mask: 4 casts a
#: step in examples/own/moe.py's bf16 CPU run, one per call).
APART_INPUTS = {"aten::scaled_dot_product_attention": (3,)}
#: Inputs whose gradients an op's backward gives in fp32 whatever type it ran in (oneDNN's LSTM
#: accumulates them so): autograd's engine casts each to its input's type in the op's own node,
#: before the gradient goes on (a weight's then back up to fp32 by the cast's own node).
FP32_GRADIENTS = {"aten::mkldnn_rnn_layer": (0, 1, 2, 3, 4)}
#: Elementwise ops of two tensors: their result takes the wider type.
PROMOTING = frozenset(f"aten::{op}"
                      for op in ("add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "cat",
                                                "stack", "where", "addcmul", "addcdiv"))
#: Promoting ops that take their tensors as one list (`ForwardOp.listed`).
LISTING = frozenset({"aten::cat", "aten::stack"})
#: Recurrent ops whose cells run as ATen ops autocast sees, the state of the input's type.
GRU = frozenset({"aten::gru"})
#: Elementwise multiplies: a reduced input's copy up is made again in backward (`_promoted`).
MULTIPLY = ("aten::mul", "aten::mul_")
#: The ops of a GRU cell's state update, in order (`_gru_state`).
UPDATE = ("aten::sub", "aten::mul_", "aten::add_")
REDUCED_NAME = {"bf16": "c10::BFloat16", "fp16": "c10::Half"}
#: c10::ScalarType's code of float32, as `aten::to` records its dtype argument (Concrete Inputs).
FLOAT32_CODE = 6


@dataclass(slots=True, frozen=True)
class ForwardOp:
    """One top-level op of a recorded forward, in program order: its
    trace row, name, layer and tensor inputs."""

    row: int
    name: str
    layer: int
    inputs: list[Tensor | None]
    layer_entry: bool = False  # the first op of its layer in this forward
    # the layers that hold its layer (module paths: "m.blocks" holds "m.blocks.0.attn"), outermost
    # first: a layer begins with the first op of it or of any layer it holds
    enclosing: tuple[int, ...] = ()
    # every input as it could be passed again (cost/shapes.OpShapes.arguments)
    arguments: list[Any] | None = None
    # the ops it called, in order, where autocast may decide on them (`autocast_view`)
    inner: tuple[ForwardOp, ...] = ()
    # the op whose calls stand in its place in `autocast_view` ("aten::gru"), "" for none
    within: str = ""
    # the shapes of the tensors in its list argument (`LISTING`: aten::cat's), whose types the
    # profiler does not record
    listed: tuple[tuple[int, ...], ...] = ()
    # which of its iteration's forward regions it runs in (amp.forward_regions): each a
    # `with autocast():` of its own, whose weight cache starts empty
    region: int = 0
    # its inputs of a parameter's shape that it broadcasts against a larger one (a bias, a layer
    # scale): fp32 under autocast, so a reduced operand is promoted
    broadcast: tuple[int, ...] = ()


@dataclass(slots=True, frozen=True)
class Cast:
    row: int  # the op it is inserted before (trace row)
    input: int  # which of its inputs
    shape: tuple[int, ...]
    from_type: str
    to_type: str
    weight: bool  # a parameter (cast once per forward)
    backward: bool  # autograd casts its gradient back in backward
    # False: no cast op in forward (an elementwise op took its reduced input as fp32 inside its
    # kernel), only autograd's cast of the gradient back to the input's type in backward
    forward: bool = True


def enclosing_layers(names: list[str]) -> list[tuple[int, ...]]:
    """Per layer (module path), the layers among `names` that hold it, outermost first."""
    index = {name: i for i, name in enumerate(names)}
    found = []
    for name in names:
        parts = name.split(".")
        found.append(tuple(index[prefix] for prefix in
                           (".".join(parts[:k]) for k in range(1, len(parts))) if prefix in index))
    return found


def decides(name: str, device_type: str) -> str | None:
    """'lower', 'fp32' or None: what autocast does with op `name` on
    `device_type` ("cuda" or "cpu")."""
    if name in LOWER[device_type]:
        return "lower"
    if name in FP32[device_type]:
        return "fp32"
    return None


def decided_anywhere(name: str) -> bool:
    """Whether autocast decides on op `name` on some device type."""
    return any(decides(name, device_type) is not None for device_type in LOWER)


def decided_everywhere(name: str) -> bool:
    """Whether autocast decides on op `name` on every device type."""
    return all(decides(name, device_type) is not None for device_type in LOWER)


def autocast_view(ops: list[ForwardOp], device_type: str) -> list[ForwardOp]:
    """The ops autocast decides on in a forward of top-level `ops`, in order. An op none of its
    lists names falls through autocast, and what it calls goes through autocast again: a composite
    op such as the CPU's `aten::gru` runs its `aten::linear` calls in the reduced type, each with
    its casts. So where an op none of the lists names called ops they do name (`ForwardOp.inner`),
    its calls stand in its place. An op a list names decides for everything it calls."""
    found: list[ForwardOp] = []
    for op in ops:
        if op.inner and decides(op.name, device_type) is None and _reaches(op.inner, device_type):
            found.extend(autocast_view([replace(inner, within=inner.within or op.name)
                                        for inner in op.inner], device_type))
        else:
            found.append(op)
    return found


def _reaches(ops: tuple[ForwardOp, ...], device_type: str) -> bool:
    """Whether autocast decides on any of `ops` or of what they call."""
    return any(decides(op.name, device_type) is not None or _reaches(op.inner, device_type)
               for op in ops)


def plan_casts(ops: list[ForwardOp], device_type: str, reduced: str = "bf16") -> list[Cast]:
    """The casts autocast inserts into one forward of `ops` (its
    top-level ops in order, recorded in fp32)."""
    return plan(ops, device_type, reduced)[0]


def plan(ops: list[ForwardOp], device_type: str,
         reduced: str = "bf16") -> tuple[list[Cast], dict[int, str]]:
    """Follow the activation's type through one forward of `ops`: the casts autocast inserts, and
    per op (trace row) the type it computes in (the reduced type or "float")."""
    follow = _Follow(REDUCED_NAME[reduced], device_type)
    for op in ops:
        follow.op(op)
    return follow.casts, follow.types


@dataclass(slots=True)
class _Follow:
    """The activation's type followed through a forward (`plan`), op by op."""

    low: str  # the reduced type's name
    device_type: str
    activation: str = FULL  # the data comes in as fp32
    # the activation's type as each layer began
    entry_type: dict[int, str] = field(default_factory=dict)
    # weights cast in this autocast: (layer, input, shape)
    cached: set[tuple[int, int, tuple[int, ...]]] = field(default_factory=set)
    casts: list[Cast] = field(default_factory=list)
    types: dict[int, str] = field(default_factory=dict)
    first: bool = True  # no op has read the data yet
    cell: _Cell = field(default_factory=lambda: _Cell())  # where a GRU's cells stand (`_gru_state`)
    region: int = 0
    # the lower op just before this one, with the activation's type and `first` before it
    lowered: tuple[ForwardOp, str, bool] | None = None

    @property
    def copied(self) -> bool:
        # CPU: a promoting op copies its reduced input up to fp32 inside its kernel
        # (TensorIterator's CPU path casts inputs of mixed types to the common one); a GPU kernel
        # casts as it loads
        return self.device_type == "cpu"

    def op(self, op: ForwardOp) -> None:
        previous, self.lowered = self.lowered, None
        if op.region != self.region:
            # a forward after a backward (the next micro-batch, a GAN's other step): a new
            # autocast, whose weight cache starts empty, and data read afresh
            self.region, self.activation, self.first = op.region, FULL, True
            self.cached.clear()
        # a layer whose first op mixes its inputs (a post-norm block's `norm(x + update)`) was
        # handed a tensor made before the activation: its caller's input, of the caller's type
        fresh = _enter(op, self.activation, self.entry_type)
        entry = self.entry_type[op.enclosing[-1] if fresh and op.enclosing else op.layer]
        low = self.low
        self.activation, state = _gru_state(op, self.activation, self.cell, low, self.copied,
                                            self.first)
        if state is not None:
            self._made(op, self.activation, state)
            return
        if _to_fp32(op):
            # the script's own `.float()`: nothing in an fp32 run, a cast up of a reduced activation
            self.casts += _cast_up(op, self.activation, low)
            self.activation = self.types[op.row] = FULL
            return
        tensors = [i for i, t in enumerate(op.inputs) if t is not None and t[1] in (FULL, low)]
        # a recorded input: None ones filtered out
        in_low = all(op.inputs[i][1] == low for i in tensors)  # type: ignore[index]
        if tensors and in_low and op.name not in PROMOTING:
            # recorded in the reduced type already (a bf16 model): nothing for autocast to cast
            self._made(op, low, [])
            return
        self._decided(op, tensors, entry, previous)

    def _made(self, op: ForwardOp, kind: str, casts: list[Cast]) -> None:
        self.casts += casts
        self.activation = self.types[op.row] = kind
        self.first = False

    def _decided(self, op: ForwardOp, tensors: list[int], entry: str,
                 previous: tuple[ForwardOp, str, bool] | None) -> None:
        """An op of recorded fp32 inputs: as autocast's lists decide it, or as type promotion
        mixes its inputs."""
        rule = decides(op.name, self.device_type)
        # a recorded input: None ones filtered out
        floats = [i for i in tensors if op.inputs[i][1] == FULL]  # type: ignore[index]
        if rule == "lower":
            self.activation, self.first = _reread(op, previous, self.activation, self.first)
            self.lowered = (op, self.activation, self.first)
            self.casts += _lower_casts(op, floats, self.activation, self.low, self.cached,
                                       self.first)
            self.activation = self.low
        elif rule == "fp32":
            self.casts += _fp32_casts(op, floats, self.activation, self.low)
            self.activation = FULL
        elif op.name in PROMOTING and len(tensors) + len(op.listed) >= 2 and op.within not in GRU:
            self.activation = _mixed(op, tensors, self.activation, entry, self.low, self.copied,
                                     self.casts)
        self.types[op.row] = self.activation
        if rule is not None or floats:
            self.first = False


def _reread(op: ForwardOp, previous: tuple[ForwardOp, str, bool] | None, activation: str,
            first: bool) -> tuple[str, bool]:
    """The activation's type and `first` for an op autocast lowers, where it reads the tensor the
    lower op just before it read: the same op of another layer, right after it, of an input of
    the same shape (attention's query, key and value projections of one tensor; two linear maps
    in a row make one, so a model rarely feeds one straight into the next), then as they were
    before that op; else as they are."""
    if previous is None:
        return activation, first
    before, was, was_first = previous
    if before.name != op.name or before.layer == op.layer or not before.inputs or not op.inputs:
        return activation, first
    if before.inputs[0] is None or op.inputs[0] is None or before.inputs[0][0] != op.inputs[0][0]:
        return activation, first
    return was, was_first


def _fp32_casts(op: ForwardOp, floats: list[int], activation: str, low: str) -> list[Cast]:
    """An op autocast runs in fp32: its first floating input cast up where the activation is
    reduced."""
    if not floats or activation != low:
        return []
    # a recorded input: None ones filtered out
    shape = op.inputs[floats[0]][0]  # type: ignore[index]
    return [Cast(op.row, floats[0], shape, low, FULL, weight=False, backward=True)]


def _to_fp32(op: ForwardOp) -> bool:
    """Whether `op` is a cast the script asks for, of an fp32 tensor to fp32 (`x.float()`,
    `x.to(torch.float32)`): `aten::to` with that dtype among its first arguments (the dtype
    overloads give it second, the device one third)."""
    if op.name != "aten::to" or not op.inputs or op.inputs[0] is None or op.inputs[0][1] != FULL:
        return False
    return ("value", FLOAT32_CODE) in (op.arguments or [])[1:3]


def _cast_up(op: ForwardOp, activation: str, low: str) -> list[Cast]:
    """The cast of `op`'s first input from the reduced type up to fp32 (its gradient's back), where
    the activation is reduced."""
    if activation != low:
        return []
    # `_to_fp32` checked that the first input was recorded
    return [Cast(op.row, 0, op.inputs[0][0], low, FULL,  # type: ignore[index]
                 weight=False, backward=True)]


def _mixed(op: ForwardOp, tensors: list[int], activation: str, entry: str, low: str,
           copied: bool, casts: list[Cast]) -> str:
    """An elementwise op of two or more tensors (PROMOTING): the type it computes in, the widest of
    the activation's and its other operand's, that is a parameter it broadcasts (fp32) where it has
    one, else the layer's input; the cast of a reduced activation appended to `casts` where the
    other is fp32."""
    other = FULL if op.broadcast else entry
    if activation == low and other == FULL:
        casts += _promoted(op, [i for i in tensors if i not in op.broadcast] or tensors, low,
                           copied)
    return FULL if FULL in (activation, other) else low


def _promoted(op: ForwardOp, tensors: list[int], low: str, copied: bool) -> list[Cast]:
    """An elementwise op of the layer's fp32 input and a reduced activation (a residual add) runs in
    fp32; in backward, autograd casts the gradient for the reduced input back to its type. Its
    shape: the op's largest input's. `copied`: the op copies the reduced input up first (a CPU's
    TensorIterator: an `aten::to` inside the op; the transformer example's bf16 CPU run made one
    in each residual `aten::add`), else its kernel reads it as it is; a multiply's backward then
    copies it up again, for the other operand's gradient (the gradient times it: a layer scale's
    `MulBackward0` in examples/own/convnext.py's bf16 CPU run)."""
    if op.listed:  # a list (aten::cat's): its last tensor, the one made just before, reduced
        return [Cast(op.row, 0, op.listed[-1], low, FULL, weight=False, backward=True,
                     forward=copied)]
    # a recorded input: None ones filtered out
    shapes = [op.inputs[i][0] for i in tensors]  # type: ignore[index]
    largest = max(range(len(shapes)), key=lambda k: elements(shapes[k]))
    casts = [Cast(op.row, tensors[largest], shapes[largest], low, FULL, weight=False,
                  backward=True, forward=copied)]
    if copied and op.name in MULTIPLY:
        casts.append(Cast(op.row, tensors[largest], shapes[largest], low, FULL, weight=False,
                          backward=True, forward=False))
    return casts


@dataclass(slots=True)
class _Cell:
    """Where a CPU GRU's cells stand, as `plan` follows its calls (`_gru_state`)."""

    state: str = FULL  # the hidden state's type: the type of the input it was made like
    first_step: bool = False  # a layer's input projected, its first step next
    updating: bool = False  # in a step's update of the state


def _gru_state(op: ForwardOp, activation: str, cell: _Cell, low: str, copied: bool,
               first: bool) -> tuple[str, list[Cast] | None]:
    """One op of a CPU `aten::gru`'s calls under autocast: (the activation's type after it, the
    casts it makes where it is decided here, else None; `cell` follows the GRU). For any other op,
    or off a CPU: (`activation`, None). `first`: no op has read the data yet.

    The GRU runs its cells as ATen ops (at::native's GRUCell). Each layer (and direction) projects
    its input with its own weights (an `aten::linear` of the whole sequence), then each step runs
    a hidden `aten::linear` of the state (a 2-D input), the gates' ops, and the update
    `(state - new_gate) * input_gate + new_gate`. The first state is made inside the op like the
    input, so the state has the input's type: where the input is fp32, the state stays fp32 under
    autocast (the update mixes it with the bf16 gates, which promotes), and each step casts it down
    for its linear (its gradient back but at a layer's first step), while each op of the update
    (`aten::sub`, `aten::mul_`, `aten::add_`) copies its gate (its second input) up, the engine
    casting that gate's gradient back in backward, and the multiply's backward copies it up again
    (the gradient times the gate). Where the input is bf16, so is everything: only the weights are
    cast. A GRU's weights all sit in one module, several of one shape, so they are told apart by
    where they are used: a projection's at it, a layer's hidden ones at its first step. A
    two-layer GRU of an fp32 input in a bf16 CPU run: every cast as planned
    (tests/cost/test_autocast.py); a bidirectional one of 48 steps a layer made 789 forward
    (examples/own/gru_tagger.py); the speech model's, of a bf16 input, none but its weights'."""
    if not copied or op.within not in GRU:
        return activation, None
    if op.name == "aten::linear" and op.inputs and op.inputs[0] is not None:
        floats = [i for i, t in enumerate(op.inputs) if t is not None and t[1] == FULL]
        # each with a fresh weight cache: a GRU's weights are told apart by where they are used
        if len(op.inputs[0][0]) == 2:  # a step's hidden linear, of the state
            # its weight and bias at a layer's first step only; the state where it is fp32, its
            # gradient back but at the first step (the op made that state: no gradient)
            used = floats if cell.first_step else [i for i in floats if i == 0]
            casts = _lower_casts(op, used, cell.state, low, set(), first=cell.first_step)
            cell.first_step = cell.updating = False
            return low, casts
        casts = _lower_casts(op, floats, activation, low, set(), first)  # a layer's projection
        cell.state, cell.first_step, cell.updating = activation, True, False
        return low, casts
    if cell.state == FULL and op.name in UPDATE and (cell.updating or op.name == UPDATE[0]) \
            and len(op.inputs) > 1 and op.inputs[1] is not None and op.inputs[1][1] == FULL:
        gate = op.inputs[1][0]
        casts = [Cast(op.row, 1, gate, low, FULL, weight=False, backward=True, forward=copied)]
        if op.name == "aten::mul_":
            casts.append(Cast(op.row, 1, gate, FULL, low, weight=False, backward=True,
                              forward=False))
        cell.updating = True
        return FULL, casts
    cell.updating = cell.updating and op.name not in PROMOTING
    return activation, None


def _enter(op: ForwardOp, activation: str, entry_type: dict[int, str]) -> bool:
    """The activation's type as each layer began: at the first op of it or of a layer it holds
    (`ForwardOp.enclosing`), or where an op says its layer begins again (`layer_entry`). Whether
    `op` is the first op of its own layer."""
    fresh = op.layer not in entry_type
    for layer in (*op.enclosing, op.layer):
        entry_type.setdefault(layer, activation)
    if op.layer_entry:
        entry_type[op.layer] = activation
    return fresh


def _lower_casts(op: ForwardOp, floats: list[int], activation: str, low: str,
                 cached: set[tuple[int, int, tuple[int, ...]]], first: bool) -> list[Cast]:
    """The casts of an op autocast runs in the reduced type: its
    parameters once per forward, its fp32 activations."""
    parameters = PARAMETER_INPUTS.get(op.name, ())
    state = STATE_INPUTS.get(op.name, ())
    casts = []
    for index in floats:
        # a recorded input: None ones filtered out
        shape = op.inputs[index][0]  # type: ignore[index]
        if index in parameters:
            key = (op.layer, index, shape)
            if key not in cached:
                cached.add(key)
                casts.append(Cast(op.row, index, shape, FULL, low, weight=True, backward=True))
        elif index in APART_INPUTS.get(op.name, ()):
            casts.append(Cast(op.row, index, shape, FULL, low, weight=False, backward=False))
        elif activation == FULL:
            casts.append(Cast(op.row, index, shape, FULL, low, weight=False,
                              backward=not first and index not in state))
    for index in FP32_GRADIENTS.get(op.name, ()):
        # the data's gradient is never asked for
        if index < len(op.inputs) and op.inputs[index] is not None and (index or not first):
            casts.append(Cast(op.row, index, op.inputs[index][0], low, FULL,  # type: ignore[index]
                              weight=False, backward=True, forward=False))
    return casts
