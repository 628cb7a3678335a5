"""Kernel classes and precision: what kind of work a GPU kernel (or, in a CPU-only trace, a CPU op)
does, and in which number format, by name. The one taxonomy of daydream: AMP, `diff`,
`faster-gpu:kernels=CLASS` and the report all ask here.

    classify("volta_sgemm_128x64_nn")                      # "gemm"
    classify("cudnn::bn_fw_tr_1C11_kernel_NCHW<float, ...>") # "normalization"
    classify("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_...")      # "gemm" (hipBLASLt / Tensile)
    precision_of("cutlass_80_tensorop_bf16_s16816gemm_...")  # "bf16"
    precision_of("volta_sgemm_128x64_nn")                  # "fp32"

One ordered table, `CLASS_PATTERNS`: the first row whose regular expression is found
in the name (case-insensitive) decides. The order is what makes short patterns safe:
convolutions come before GEMMs because cuDNN's and MIOpen's implicit-GEMM convolutions
have "gemm" in their names, copies come before elementwise kernels because PyTorch's
copy kernels are instances of its elementwise template, and so on. A class may have
several rows. Names that match no row are "other". The rows cover cuBLAS, cuBLASLt,
cuDNN, CUTLASS, nvjet, NCCL/RCCL, hipBLASLt/Tensile (`Cijk_`), rocBLAS, MIOpen, Composable
Kernel (`ck::`, `ck_tile::`), aiter, FBGEMM, vLLM, flash/sage attention, Triton (inductor's
`triton_poi_`/`triton_red_`/`triton_per_`/`triton_tem_` prefixes), ATen CUDA kernels and
ATen CPU op names (`aten::addmm`, autograd's `AddmmBackward0`).

Precision (`PRECISIONS`) comes from the whole name, template arguments included
(`CUDAFunctor_add<c10::BFloat16>`), and from the data-type token of Tensile names; a GEMM
on tensor cores with no other hint is tf32 (an fp32 model on Ampere or newer); "unknown"
where the name says nothing (nvjet, inductor kernels, memsets).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

#: The classes, in the order reports list them.
CLASSES = ("gemm", "convolution", "attention", "normalization", "elementwise", "reduction",
           "memory", "embedding", "communication", "optimizer", "other")

#: Number formats, from the widest; "unknown" where the name does not say.
PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "unknown")
#: The formats mixed precision converts from, and those it leaves alone.
FULL_PRECISION = ("fp32", "tf32")
REDUCED_PRECISION = ("bf16", "fp16", "fp8", "int8")

_ATEN_ELEMENTWISE = (
    "add|sub|rsub|mul|div|neg|abs|sign|exp|log|log1p|sqrt|rsqrt|pow|reciprocal|sin|cos|tanh|"
    "sigmoid|relu|gelu|silu|elu|leaky_relu|hardtanh|threshold|threshold_backward|clamp|clamp_min|"
    "clamp_max|where|masked_fill|dropout|native_dropout|addcmul|addcdiv|lerp|maximum|minimum|eq|ne|"
    "lt|le|gt|ge|erf|floor|ceil|round|logical_\\w+|bitwise_\\w+|gelu_backward|silu_backward|"
    "sigmoid_backward|tanh_backward"
)

#: (class, pattern) rows, first match wins. Patterns are searched case-insensitively.
CLASS_PATTERNS: tuple[tuple[str, str], ...] = (
    # NCCL/RCCL kernels, collectives' CPU ops, custom all-reduce kernels.
    ("communication",
     r"nccl|rccl|c10d::|record_param_comms|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|"
     r"sendrecv|multimem_"),
    # Inductor's kernels keep the class of their template, whatever the fused ops their names list.
    ("elementwise", r"^triton_poi_"),
    ("reduction", r"^triton_(red|per)_"),
    ("gemm", r"^triton_tem_"),
    # Copies, layout changes, fills, gathers and cache writes (PyTorch's copy and fill kernels are
    # elementwise instances).
    ("memory", r"^mem(cpy|set)\b|memcpy|memset|copy_kernel|copy_device_to_device|batchedcopy|"
               r"catarraybatchedcopy|nchwtonhwc|nhwctonchw|fillfunctor|batched_transpose|"
               r"transpose_|subtensoropwithcasttensor|index_?select|indexselect|vectorized_gather|"
               r"gather_kernel|scatter_kernel|reshape_and_cache|copy_page_indices|"
               r"fbgemm_gpu::(permute|_block_bucketize|_offsets_range)|bounds_check_indices|"
               r"linearize_index|indexing_backward|scatter_gather|index_elementwise_kernel|"
               r"index_put|^aten::(copy_|_to_copy|to|contiguous|clone|cat|stack|fill_|zero_|zeros|"
               r"ones|full|index_select|gather|scatter)$"),
    ("attention", r"attention|flash_|flash::|fmha|sdpa|scaled_dot_product|\battn_(fwd|bwd)|"
                  r"sage_(fwd|bwd|attn)|mha_(fwd|bwd|varlen)|paged_attn|unified_attention"),
    ("normalization",
     r"batch_?norm|layer_?norm|group_?norm|instance_?norm|rms_?norm|bn_(fw|bw)_|bnfwd|bnbwd|"
     r"qknorm|rowwisemoments|gammabetabackward|miopenbatchnorm"),
    # cuDNN/CUTLASS/MIOpen/CK convolutions (implicit GEMMs among them),
    # winograd, im2col, ATen conv ops.
    ("convolution",
     r"conv(?!ert)|scudnn|cutlass_cudnn|cask_cudnn|cudnn::cnn|cudnn::detail::(d|w)grad|winograd|"
     r"im2col|im2d2col|col2im|(f|d|w)grad|xmma_fprop|igemm_(fwd|bwd|wrw)|miopensp\d|"
     r"gridwise_convolution"),
    # Embedding lookups and their backward (FBGEMM's table-batched
    # embeddings, EmbeddingBag); rotary ones are elementwise.
    ("elementwise", r"rotary|\brope_|_rope_|fused_rope"),
    ("embedding", r"embedding|embbag|embedding_?bag|permute_pooled_embs"),
    ("gemm",
     r"(?<!fb)gemm|gemv|matmul|cublas|nvjet|splitkreduce|magma_|^bmm_|^cijk_|rocblas|hipblaslt|"
     r"wvspl(i)?tk|ck::kernel_(moe_)?gemm|gridwisegemm|"
     r"aten::(addmm|mm|bmm|baddbmm|addbmm|addmv|mv|dot|linear|_addmm_activation)$|"
     r"(addmm|mm|bmm|baddbmm|linear)backward"),
    # Fused and foreach optimizer kernels (PyTorch's foreach kernels serve optimizer steps) and ops.
    ("optimizer", r"multi_tensor_apply|adam|adagrad|(?<![a-z])sgd(?![a-z])|lamb(?!da)|rmsprop|"
                  r"optimizer\.|_foreach_"),
    # Softmax is a reduction (a row max and sum) unless an attention kernel fuses it (rows above).
    ("reduction", r"softmax|reduce|cub::device(reduce|scan|segmentedreduce|radixsort)|devicescan|"
                  r"deviceradixsort|rocprim::|(max|avg)_?pool|nll_?loss|nllcriterion|cross_entropy|"
                  r"argmax|argmin|cumsum|topk|moesorting|moe::dev::(routing|finalize)|"
                  r"^aten::(sum|mean|max|min|amax|amin|norm|linalg_vector_norm|"
                  r"prod|var|std|all|any|topk|_softmax|softmax|log_softmax|_log_softmax)$|(sum|"
                  r"mean)backward"),
    ("elementwise",
     r"elementwise|functor|subtensorop|act_and_mul|silu|gelu|quant|scal_kernel|scalepackedtensor|"
     r"upsample|epilogue::|^aten::(" + _ATEN_ELEMENTWISE + r")_?$|"
                    r"(relu|threshold|gelu|silu|sigmoid|tanh|add|sub|mul|div|neg|pow|exp|log|sqrt|"
                    r"rsqrt|clamp|where|nativedropout|dropout)backward"),
)

#: (precision, pattern) rows, first match wins; searched in the whole name, case-insensitively.
PRECISION_PATTERNS: tuple[tuple[str, str], ...] = (
    # An fp8 KV-cache type enum in a template (vLLM's Fp8KVCacheDataType) is not the data type.
    ("fp8", r"fp8(?!kvcache)|float8|e4m3|e5m2|mxe2m1|f8f6f4|\bfp4|nvfp4"),
    # Composable Kernel stored bfloat16 as `unsigned short` before it had bhalf_t.
    ("bf16", r"bf16|bfloat16|bhalf_t|DF16b|^(void )?ck(_tile)?::[^(]*unsigned short"),
    ("fp16", r"fp16|c10::half|__half\b|\bhalf\b|_half\b|half_t|<half|\bf16\b|_f16_|h884|h1688|"
             r"h16816|hgemm|_hmma"),
    ("int8", r"\bint8\b|i8gemm|imma_|s8s8"),
    ("tf32", r"tf32|tensorop_s(1688|16816)"),
    ("fp64", r"\bdouble\b|dgemm|fp64"),
    ("fp32", r"\bfloat\b|float,|<float|fp32|f32|sgemm|scudnn|sgemv|single"),
)

#: A GEMM or convolution on tensor cores with no other precision hint
#: runs tf32 (an fp32 model, TF32 allowed).
TENSOR_CORE = re.compile(r"tensorop|s1688|s884|16816|xmma|wgmma|hmma", re.IGNORECASE)
#: Tensile / hipBLASLt names carry their data type after the layouts:
#: Cijk_Alik_Bljk_BBS_... is bf16.
_TENSILE = re.compile(r"^Cijk_[A-Za-z]+_[A-Za-z]+_([A-Z0-9]+)_")
_TENSILE_TYPES = (("F8", "fp8"), ("B8", "fp8"), ("I8", "int8"), ("BB", "bf16"), ("HH", "fp16"),
                  ("B", "bf16"), ("H", "fp16"), ("S", "fp32"), ("D", "fp64"))

_COMPILED = tuple((name, re.compile(pattern, re.IGNORECASE)) for name, pattern in CLASS_PATTERNS)
_PRECISIONS = tuple((name, re.compile(pattern, re.IGNORECASE))
                    for name, pattern in PRECISION_PATTERNS)


#: A name is read for its class and precision up to here: what tells them
#: apart is in its first few hundred characters, and a damaged trace's
#: names can run to megabytes (each pattern would scan them whole).
MAX_NAME_CHARS = 4096


def classify(name: str) -> str:
    """The class of a kernel or op called `name` (one of CLASSES), read
    from its first MAX_NAME_CHARS."""
    head = signature_head(name[:MAX_NAME_CHARS])
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


def classes_of(names: np.ndarray, strings: Sequence[str]) -> np.ndarray:
    """Class index (into CLASSES) of each name id in `names`; each
    distinct name is classified once."""
    return _per_distinct_name(names, strings, lambda name: CLASSES.index(classify(name)))


def precision_of(name: str) -> str:
    """The number format of a kernel called `name` (one of PRECISIONS),
    read from its first MAX_NAME_CHARS."""
    name = name[:MAX_NAME_CHARS]
    tensile = _TENSILE.match(name)
    if tensile:
        token = tensile.group(1)
        for prefix, precision in _TENSILE_TYPES:
            if token.startswith(prefix):
                return precision
    for precision, pattern in _PRECISIONS:
        if pattern.search(name):
            return precision
    if TENSOR_CORE.search(name) and classify(name) in ("gemm", "convolution"):
        return "tf32"
    return "unknown"


def precisions_of(names: np.ndarray, strings: Sequence[str]) -> np.ndarray:
    """Precision index (into PRECISIONS) of each name id in `names`;
    each distinct name is read once."""
    return _per_distinct_name(names, strings, lambda name: PRECISIONS.index(precision_of(name)))


#: Where GEMM kernel names carry their output tile (rows x columns of C one thread block
#: computes), first match wins: Tensile/hipBLASLt `MT64x16x256`, CUTLASS/TensorRT-LLM
#: `_t128x8x128`, cuBLAS sm90 `tilesize128x128x64`, nvjet `nvjet_sm90_tst_64x16_...`,
#: Composable Kernel's MPerBlock and NPerBlock after the block size
#: (`GemmSpecialization)0, 256, 32, 64, ...`), cuBLAS/CUTLASS `..gemm.._128x64_`.
_TILES = tuple(re.compile(pattern, re.IGNORECASE) for pattern in (
    r"_MT(\d+)x(\d+)x\d+",
    r"_t(\d+)x(\d+)x\d+",
    r"tilesize(\d+)x(\d+)x\d+",
    r"^nvjet_(?:sm\d+[a-z]?_)?[a-z]+_(\d+)x(\d+)_",
    r"GemmSpecialization\)\d+, \d+, (\d+), (\d+),",
    r"gemm[a-z0-9_]*?_(\d+)x(\d+)(?:_|$)",
))
#: GEMM-class kernels that stream their operands by construction:
#: matrix-vector products and split-K reductions.
STREAMING_GEMM = re.compile(r"gemv|splitkreduce", re.IGNORECASE)


def gemm_tile(name: str) -> tuple[int, int] | None:
    """The output tile (rows, columns) a thread block of the GEMM kernel `name` computes, where the
    name says; `gemm_tile("volta_sgemm_128x64_nn")` is (128, 64),
    `gemm_tile("Cijk_..._MT64x16x256_MI16x16x1_...")` (64, 16)."""
    head = name[:MAX_NAME_CHARS]
    for pattern in _TILES:
        found = pattern.search(head)
        if found:
            return int(found.group(1)), int(found.group(2))
    return None


def tiles_of(names: np.ndarray, strings: Sequence[str]) -> np.ndarray:
    """Per name id in `names`: (rows, columns) of its output tile, (0,
    0) where the name does not say; shape (n, 2)."""
    unique, inverse = np.unique(np.asarray(names), return_inverse=True)
    if unique.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    tiles = np.array([gemm_tile(strings[int(n)]) or (0, 0) for n in unique],
                     dtype=np.int64).reshape(-1, 2)
    return tiles[inverse.reshape(-1)]


def streaming_of(names: np.ndarray, strings: Sequence[str]) -> np.ndarray:
    """Per name id in `names`: whether it names a matrix-vector product
    or a split-K reduction (STREAMING_GEMM)."""
    return _per_distinct_name(names, strings,
                              lambda name: int(
                                  bool(STREAMING_GEMM.search(name[:MAX_NAME_CHARS])))) == 1


def _per_distinct_name(names: np.ndarray, strings: Sequence[str],
                       label: Callable[[str], int]) -> np.ndarray:
    unique, inverse = np.unique(np.asarray(names), return_inverse=True)
    if unique.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.array([label(strings[int(n)]) for n in unique], dtype=np.int64)[inverse.reshape(-1)]
