#pragma once
// The CPU's f64 kernels (cpu_ops_f64.cpp): elementwise ops, sum/mean/max and matrix products
// computed in double. The executor sends a kernel here when it reads or writes an f64 tensor
// and no native kernel (data movement, cast, index ops) takes it.
#include <string>

#include "runtime/executor.h"

namespace rlx::cpu {

// A node kernel with an f64 input or output.
bool touches_f64(const Kernel& k);
void run_f64(const Kernel& k);
// Why the CPU cannot run node `n` on f64 tensors ("" when it can): checked when planning.
std::string f64_refusal(const ir::Node& n);

}  // namespace rlx::cpu
