"""Kernel classes: what kind of work a GPU kernel (or, in a CPU-only trace, a CPU op) does, by name.

    classify("volta_sgemm_128x64_nn")                      # "gemm"
    classify("cudnn::bn_fw_tr_1C11_kernel_NCHW<float, ...>") # "normalization"
    classify("aten::addmm")                                # "gemm"

One ordered table, `CLASS_PATTERNS`: the first row whose regular expression is found
in the name (case-insensitive) decides. The order is what makes short patterns safe:
convolutions come before GEMMs because cuDNN's implicit-GEMM convolutions have "gemm"
in their names, copies come before elementwise kernels because PyTorch's copy kernels
are instances of its elementwise template, and so on. A class may have several rows.
Names that match no row are "other". The rows cover cuBLAS, cuBLASLt, cuDNN, CUTLASS,
nvjet, NCCL, Triton (inductor's `triton_poi_`/`triton_red_`/`triton_per_`/`triton_tem_`
prefixes), ATen CUDA kernels and ATen CPU op names (`aten::addmm`, autograd's
`AddmmBackward0`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

#: The classes, in the order reports list them.
CLASSES = ("gemm", "convolution", "attention", "normalization", "elementwise", "reduction", "memory",
           "communication", "optimizer", "other")

_ATEN_ELEMENTWISE = (
    "add|sub|rsub|mul|div|neg|abs|sign|exp|log|log1p|sqrt|rsqrt|pow|reciprocal|sin|cos|tanh|sigmoid|relu|gelu|silu|"
    "elu|leaky_relu|hardtanh|threshold|threshold_backward|clamp|clamp_min|clamp_max|where|masked_fill|dropout|"
    "native_dropout|addcmul|addcdiv|lerp|maximum|minimum|eq|ne|lt|le|gt|ge|erf|floor|ceil|round|logical_\\w+|"
    "bitwise_\\w+|gelu_backward|silu_backward|sigmoid_backward|tanh_backward"
)

#: (class, pattern) rows, first match wins. Patterns are searched case-insensitively.
CLASS_PATTERNS: tuple[tuple[str, str], ...] = (
    # NCCL/RCCL kernels, collectives' CPU ops, custom all-reduce kernels.
    ("communication", r"nccl|rccl|c10d::|record_param_comms|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|"
                      r"sendrecv"),
    # Copies, layout changes and fills (PyTorch's copy and fill kernels are elementwise instances).
    ("memory", r"^mem(cpy|set)\b|memcpy|memset|copy_kernel|copy_device_to_device|batchedcopy|nchwtonhwc|"
               r"nhwctonchw|fillfunctor|^aten::(copy_|_to_copy|to|contiguous|clone|cat|stack|fill_|zero_|zeros|"
               r"ones|full|index_select|gather|scatter)$"),
    # Inductor's pointwise kernels stay elementwise even when their fused name mentions a layer op.
    ("elementwise", r"^triton_poi_"),
    ("attention", r"softmax|attention|flash_|flash::|fmha|sdpa|scaled_dot_product"),
    ("normalization", r"batch_?norm|layer_?norm|group_?norm|instance_?norm|rms_?norm|bn_(fw|bw)_|"
                      r"rowwisemoments|gammabetabackward"),
    # cuDNN/CUTLASS convolutions (implicit GEMMs among them), winograd, im2col, ATen conv ops.
    ("convolution", r"conv(?!ert)|scudnn|cutlass_cudnn|cask_cudnn|cudnn::cnn|cudnn::detail::(d|w)grad|winograd|"
                    r"im2col|col2im|(f|d|w)grad|xmma_fprop"),
    ("gemm", r"(?<!fb)gemm|gemv|matmul|cublas|nvjet|splitkreduce|magma_|triton_tem_|^bmm_|"
             r"aten::(addmm|mm|bmm|baddbmm|addbmm|addmv|mv|dot|linear|_addmm_activation)$|"
             r"(addmm|mm|bmm|baddbmm|linear)backward"),
    # Fused and foreach optimizer kernels (PyTorch's foreach kernels serve optimizer steps) and ops.
    ("optimizer", r"multi_tensor_apply|adam|adagrad|(?<![a-z])sgd(?![a-z])|lamb(?!da)|rmsprop|optimizer\.|_foreach_"),
    ("reduction", r"^triton_(red|per)_|reduce|cub::device(reduce|scan|segmentedreduce)|(max|avg)_?pool|nll_?loss|nllcriterion|"
                  r"cross_entropy|argmax|argmin|cumsum|^aten::(sum|mean|max|min|amax|amin|norm|linalg_vector_norm|"
                  r"prod|var|std|all|any|topk)$|(sum|mean)backward"),
    ("elementwise", r"elementwise|functor|^aten::(" + _ATEN_ELEMENTWISE + r")_?$|"
                    r"(relu|threshold|gelu|silu|sigmoid|tanh|add|sub|mul|div|neg|pow|exp|log|sqrt|rsqrt|clamp|where|"
                    r"nativedropout|dropout)backward"),
)

_COMPILED = tuple((name, re.compile(pattern, re.IGNORECASE)) for name, pattern in CLASS_PATTERNS)


def classify(name: str) -> str:
    """The class of a kernel or op called `name` (one of CLASSES)."""
    head = signature_head(name)
    for klass, pattern in _COMPILED:
        if pattern.search(head):
            return klass
    return "other"


def signature_head(name: str) -> str:
    """`name` without a C++ signature's parameter list, which names types, not work.

    `void f<T, g(int)>(cublasLtEpilogue_t, int)` gives `f<T, g(int)>`: the cut is at the first
    "(" outside template arguments and parentheses; inside parentheses a "<" or ">" is a
    comparison (`std::enable_if<(N>0)>`), not a bracket; `(anonymous namespace)` is a name.
    """
    name = name.replace("(anonymous namespace)", "{anonymous}")
    angle = paren = 0
    for position, char in enumerate(name):
        if char == "(":
            if angle == 0 and paren == 0:
                return name[:position].removeprefix("void ").strip() or name
            paren += 1
        elif char == ")":
            paren = max(paren - 1, 0)
        elif paren == 0 and char == "<":
            angle += 1
        elif paren == 0 and char == ">":
            angle = max(angle - 1, 0)
    return name.removeprefix("void ").strip()


def classify_strings(strings: Sequence[str]) -> np.ndarray:
    """Class index (into CLASSES) of every string of a string table, for indexing by name id."""
    index = {klass: i for i, klass in enumerate(CLASSES)}
    return np.array([index[classify(s)] for s in strings], dtype=np.int8)
