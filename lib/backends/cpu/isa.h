#pragma once
// The CPU instruction-set levels rlx's own kernels choose between, read once from cpuid and
// capped by RLX_CPU_ISA (base | avx2 | avxvnni | avx512vnni; docs/backends.md, "CPU classes").
// One place for the choice: the GEMM, the fused elementwise kernels and the convolutions ask
// here. (The int8 products have their finer levels in qgemm.h, half precision in half_gemm.h.)
namespace rlx::cpu {

bool isa_avx2_fma();  // AVX2 + FMA, unless RLX_CPU_ISA=base
bool isa_avx512();    // AVX-512 F, unless RLX_CPU_ISA is below avx512vnni
bool isa_avx512_bw_vl();  // AVX-512 F, BW and VL, under the same cap

}  // namespace rlx::cpu
