"""The one kernel taxonomy on every kernel family of the corpus: class and precision, checked by hand.

kernel_names.tsv holds one real name per kernel family of ../shared/traces (both sets: NVIDIA
2021-2025, and ROCm / CUDA 13), with the class and precision that the libraries' naming
conventions give them (the file's header says which conventions).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from daydream.mapping.classes import CLASSES, PRECISIONS, classify, precision_of

TABLE = Path(__file__).with_name("kernel_names.tsv")
ROWS = [line.split("\t", 3) for line in TABLE.read_text().splitlines() if line and not line.startswith("#")]
SET_2 = ("hta/amd_trace/", "tracelens/mi300/", "tracelens/inference/", "tracelens/semantic_purity/")


def test_the_table_covers_both_sets_and_every_class() -> None:
    assert len(ROWS) >= 150
    assert sum(trace.startswith(SET_2) for _, _, trace, _ in ROWS) >= 40
    assert sum(not trace.startswith(SET_2) for _, _, trace, _ in ROWS) >= 100
    assert {klass for klass, _, _, _ in ROWS} == set(CLASSES)
    assert {precision for _, precision, _, _ in ROWS} >= {"fp32", "tf32", "bf16", "fp16", "fp8", "unknown"}


@pytest.mark.parametrize("klass, precision, trace, name", ROWS, ids=[f"{row[2]}:{row[3][:40]}" for row in ROWS])
def test_class_and_precision_of_a_real_kernel(klass: str, precision: str, trace: str, name: str) -> None:
    assert klass in CLASSES and (precision == "-" or precision in PRECISIONS)
    assert classify(name) == klass
    if precision != "-":
        assert precision_of(name) == precision


@pytest.mark.parametrize("name, precision", [
    # Tensile's data-type token after the layouts, whatever the rest of the name says
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x128", "bf16"),
    ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128", "bf16"),
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32", "fp16"),
    ("Cijk_Ailk_Bljk_S_B_Bias_HA_S_SAV_UserArgs_MT16x16x128", "fp32"),
    ("Cijk_Ailk_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x16", "fp32"),
    # tensor cores with no other hint: tf32; a bf16 CUTLASS kernel is bf16 although it names s16816
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(Params)", "tf32"),
    ("cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>", "bf16"),
    ("volta_h884gemm_64x64_ldg8_nn", "fp16"),
    ("sm90_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n_tilesize128x128x128", "fp8"),
    ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", "unknown"),
])
def test_precision_conventions(name: str, precision: str) -> None:
    assert precision_of(name) == precision


@pytest.mark.parametrize("name, klass", [
    ("sage_fwd_kernel<64, true>", "attention"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::LogSoftMaxForwardEpilogue>",
     "reduction"),
    ("void split_embedding_codegen_forward_unweighted_kernel<float, float, float, false, long, 1ul, 16ul>(...)", "embedding"),
    ("miopenSp3AsmConv_v21_1_3_gfx9_fp32_stride1", "convolution"),
    ("rocblas_gemm_ex_kernel<float>", "gemm"),
])
def test_rocm_and_other_families(name: str, klass: str) -> None:
    assert classify(name) == klass
