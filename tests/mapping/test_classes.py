"""The kernel-class table on real kernel and op names, with the expected class written by hand.

GPU names are copied from the traces in ../shared/traces (HTA, param, kineto, TraceLens)
and examples/traces; CPU op names from a `daydream trace` of examples/mlp.py on the CPU.
"""

from __future__ import annotations

import pytest

from daydream.mapping.classes import CLASS_PATTERNS, CLASSES, classify, signature_head

KERNELS = [
    # cuBLAS / cuBLASLt / CUTLASS / nvjet GEMMs
    ("volta_sgemm_128x64_nn", "gemm"),
    ("ampere_sgemm_32x128_tn", "gemm"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4::Params)",
     "gemm"),
    ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "gemm"),
    ("void splitKreduce_kernel<float, float, float, float, true, false, false>(cublasSplitKParams<float>, float const*, "
     "float const*, float*, float const*, float const*, float const*)", "gemm"),
    # cuDNN / CUTLASS convolutions, including implicit GEMMs (whose names say gemm)
    ("void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, true, true>(int, int, int, float const*, int, "
     "float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, float const*, float const*, bool, "
     "int, int)", "convolution"),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32_stage5_warpsize2x2x1_g1_tensor16x8x8_"
     "execute_kernel_cudnn_infer", "convolution"),
    ("volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "convolution"),
    ("_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemmMultistageINS_"
     "4gemm9GemmShapeILi128ELi128ELi32EEE", "convolution"),
    ("void cudnn::detail::dgrad_engine<float, 128, 6, 7, 3, 3, 5, false>(int, int, int, float const*, int, float const*, int, "
     "float*, kernel_grad_params, unsigned long long, int, unsigned long long, int, float, int, int, int)", "convolution"),
    # attention; a softmax alone is a reduction (a CNN's log_softmax loss is no attention)
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, int, int, int, "
     "bool const*, int, bool)", "reduction"),
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
     "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, "
     "false, false, true, false>(pytorch_flash::Flash_fwd_params)", "attention"),
    ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext", "attention"),
    # normalization
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, float const*, cudnnTensorStruct, "
     "float*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)", "normalization"),
    ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<float, float>(float const*, float const*, "
     "float const*, float const*, float const*, float*, int)", "normalization"),
    # the "<" inside std::enable_if's parentheses is a comparison, not a template bracket
    ("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
     "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, c10::BFloat16 const*, float, "
     "int, int)", "normalization"),
    # elementwise
    ("void at::native::vectorized_elementwise_kernel<4, at::native::threshold_kernel_impl<float>(at::TensorIteratorBase&, "
     "float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3> >(int, at::native::threshold_kernel_impl<float>("
     "at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3>)", "elementwise"),
    ("triton_poi_fused_add_bitwise_and_bitwise_not_bitwise_or_ge_lt_mul_sub_0", "elementwise"),
    # reductions, pooling, losses
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>, unsigned int, "
     "float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float>, unsigned int, float, 4>)", "reduction"),
    ("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, long, long, long, int, "
     "int, int, int, int, int, int, int, int, int, float*, long*)", "reduction"),
    ("void cunn_ClassNLLCriterion_updateOutput_kernel<float, float>(float*, float*, float*, long*, float*, int, int, int, int, "
     "long)", "reduction"),
    # copies and fills: PyTorch's copy and fill kernels are instances of its elementwise templates
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}"
     "::operator()() const::{lambda()#4}::operator()() const::{lambda(long)#1}, std::array<char*, 2ul>, 4, "
     "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
     "at::native::memory::StoreWithCast<1> >(int)", "memory"),
    ("void at::native::vectorized_elementwise_kernel<2, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, "
     "at::native::FillFunctor<float>, at::detail::Array<char*, 1>)", "memory"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 3, 64, 64>(float*, "
     "at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 64, 64>, "
     "at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)", "memory"),
    ("void nhwcToNchwKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>(int, int, int, int, float const*, "
     "float*, float, float)", "memory"),
    ("Memcpy DtoD (Device -> Device)", "memory"),
    ("Memset (Device)", "memory"),
    # communication
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "communication"),
    ("ncclDevKernel_AllGather_RING_LL", "communication"),
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, unsigned int**, "
     "unsigned long, unsigned long)", "communication"),
    # optimizers: fused Adam and the foreach kernels of optimizer steps
    ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float, float, float, float, float, float, float, "
     "float, adamMode_t, float, int, int, int>(int, int volatile*, TensorListMetadata<4>, AdamFunctor<float>, float)", "optimizer"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, "
     "at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>("
     "at::native::(anonymous namespace)::TensorListMetadata<2>)", "optimizer"),
    # types named only in the parameter list do not decide (cuBLAS, fbgemm types there)
    ("void scal_kernel<float, float, 1, false, 6, 5, 5, 3>(cublasTransposeParams<float>, float const*, float*, float const*)",
     "elementwise"),
    ("void bounds_check_indices_kernel<long>(at::GenericPackedTensorAccessor<long, 1ul, at::RestrictPtrTraits, int>, "
     "fbgemm_gpu::FixedDivisor)", "memory"),
    ("void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>::Policy800, false, long, int, int, "
     "int>(int*, int*, int*, int const*, long*, long const*, int*, int const*, int, int, int)", "reduction"),
    # FBGEMM's table-batched embeddings are embedding lookups, not GEMMs
    ("void split_embedding_codegen_forward_unweighted_kernel<float, float, float, false, long, 1ul, 16ul>("
     "at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>)", "embedding"),
    ("triton__0d1d2d3d", "other"),
]

CPU_OPS = [
    ("aten::addmm", "gemm"),
    ("aten::mm", "gemm"),
    ("aten::linear", "gemm"),
    ("autograd::engine::evaluate_function: AddmmBackward0", "gemm"),
    ("aten::mkldnn_convolution", "convolution"),
    ("autograd::engine::evaluate_function: ConvolutionBackward0", "convolution"),
    ("aten::_log_softmax", "reduction"),
    ("aten::scaled_dot_product_attention", "attention"),
    ("aten::native_layer_norm", "normalization"),
    ("autograd::engine::evaluate_function: NativeLayerNormBackward0", "normalization"),
    ("aten::relu", "elementwise"),
    ("aten::add_", "elementwise"),
    ("aten::threshold_backward", "elementwise"),
    ("aten::addcdiv_", "elementwise"),
    ("autograd::engine::evaluate_function: ReluBackward0", "elementwise"),
    ("aten::sum", "reduction"),
    ("aten::nll_loss_forward", "reduction"),
    ("aten::max_pool2d_with_indices", "reduction"),
    ("aten::copy_", "memory"),
    ("aten::cat", "memory"),
    ("aten::zero_", "memory"),
    ("c10d::allreduce_", "communication"),
    ("aten::_foreach_add_", "optimizer"),
    ("Optimizer.step#Adam.step", "optimizer"),
    ("aten::view", "other"),
    ("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", "other"),
]


@pytest.mark.parametrize("name, expected", KERNELS + CPU_OPS)
def test_class_of_real_names(name: str, expected: str) -> None:
    assert classify(name) == expected


def test_every_class_in_the_table_is_listed() -> None:
    assert {klass for klass, _ in CLASS_PATTERNS} | {"other"} == set(CLASSES)
    assert {expected for _, expected in KERNELS + CPU_OPS} == set(CLASSES)


@pytest.mark.parametrize("name, head", [
    ("void f<int>(int, cublasLtEpilogue_t)", "f<int>"),
    ("void at::native::(anonymous namespace)::k<float>(float*)", "at::native::{anonymous}::k<float>"),
    ("std::enable_if<(N>0), void>::type g<N>(int)", "std::enable_if<(N>0), void>::type g<N>"),
    ("volta_sgemm_128x64_nn", "volta_sgemm_128x64_nn"),
])
def test_signature_head_drops_the_parameter_list(name: str, head: str) -> None:
    assert signature_head(name) == head


def test_a_name_is_read_up_to_its_first_max_name_chars() -> None:
    # A damaged trace's name of a megabyte: its class and precision come from its head, the rest is never scanned.
    from daydream.mapping.classes import MAX_NAME_CHARS, precision_of

    padding = "x" * MAX_NAME_CHARS
    assert classify("void sgemm_kernel_" + padding * 256) == "gemm" and precision_of("sgemm_" + padding * 256) == "fp32"
    assert classify(padding + "gemm") == "other" and precision_of(padding + "bf16") == "unknown"
    assert classify("void f(" * (2**20 // 7)) == classify("void f(")  # a megabyte of open parentheses


@pytest.mark.parametrize(("name", "tile"), [
    # Kernel names as the corpus records them (set 1 and set 2), the tile read by hand from each library's naming.
    ("volta_sgemm_128x64_nn", (128, 64)),
    ("ampere_sgemm_32x32_sliced1x4_tn", (32, 32)),
    ("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_nn_align8", (256, 128)),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel", (128, 128)),
    ("nvjet_sm103_tst_384x16_64x4_4x1_v_bz_TNT", (384, 16)),
    ("bmm_Bfloat16_Bfloat16Bfloat16_Fp32_t128x8x128u2_s6_et128x8_m128x8x16_c1x1x1_16dp256b_rM_BN", (128, 8)),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT32x16x256_MI16x16x1_SN_LDSB1", (32, 16)),
    ("void ck::kernel_moe_gemm<ck::GridwiseMoeGemm<ck::tensor_layout::gemm::RowMajor, unsigned short, "
     "(ck::tensor_operation::device::GemmSpecialization)0, 256, 32, 64, 64, 8, 8, 16, 16, 2, 1>", (32, 64)),
    ("void gemvNSP_kernel<float, float, float, float, 1, 32, 4, 1024>(int)", None),
    ("void magma_sgemmEx_kernel<float, float, float, true, false, 6, 4, 6, 3, 4>(int)", None),
])
def test_gemm_tiles_from_names(name: str, tile: tuple[int, int] | None) -> None:
    from daydream.mapping.classes import gemm_tile

    assert gemm_tile(name) == tile
