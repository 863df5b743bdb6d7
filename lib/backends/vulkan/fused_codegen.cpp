#include "backends/vulkan/fused_codegen.h"

#include <chrono>
#include <cstring>
#include <sstream>

#include "backends/vulkan/ew_glsl.h"
#include "backends/vulkan/glsl_compiler.h"
#include "io/blob_cache.h"

namespace rlx::vk {

extern const char* const kCommonGlsl;  // shaders/common.glsl (generated glsl_sources.cpp)

namespace {

std::string layout_key(const FusedLayout& l) {
  std::string k = "|r" + std::to_string(l.rank) + "|v";
  for (uint32_t m : l.varies) k += std::to_string(m) + ",";
  k += "|k";
  for (uint32_t m : l.kinds) k += std::to_string(m);
  return k;
}

// Index expression of an input that varies along the dims in `mask`.
std::string index_expr(uint32_t mask, uint32_t rank) {
  uint32_t all = rank >= 32 ? ~0u : (1u << rank) - 1;
  if ((mask & all) == all) return "i";
  if ((mask & all) == 0) return "0u";
  std::string idx, stride;
  for (int d = (int)rank - 1; d >= 0; --d) {
    if (!(mask & (1u << d))) continue;
    std::string term = "c" + std::to_string(d) + (stride.empty() ? "" : " * " + stride);
    idx = idx.empty() ? term : idx + " + " + term;
    std::string dim = "pc.dims[" + std::to_string(d) + "]";
    stride = stride.empty() ? dim : stride + " * " + dim;
  }
  return idx;
}

}  // namespace

std::string fused_glsl(const FusedProgram& p, const FusedLayout& l) {
  size_t n = p.input_shapes.size();
  std::ostringstream s;
  auto kind = [&](size_t j) { return j < l.kinds.size() ? l.kinds[j] : 0u; };
  bool any16 = false;
  for (size_t j = 0; j <= n; ++j) any16 = any16 || kind(j) != 0;
  s << "#version 450\n";
  if (any16) s << "#extension GL_EXT_shader_16bit_storage : require\n";
  s << "// fused: " << p.describe() << "\nlayout(local_size_x = " << kEwGroup << ") in;\n"
    << kCommonGlsl << "\n";
  // Only the formulas this program uses, one function each (the whole op library behind a
  // switch is more for glslang and the driver to compile and fold away).
  std::vector<bool> unary_done(256), binary_done(256);
  for (const FusedInstr& in : p.code) {
    if (in.kind == FusedInstr::Unary && !unary_done[(unsigned)in.op]) {
      unary_done[(unsigned)in.op] = true;
      s << "float rlx_u" << (unsigned)in.op << "(float x) { return " << ew_glsl(in.op) << "; }  // " << ew_name(in.op) << "\n";
    } else if (in.kind == FusedInstr::Binary && !binary_done[(unsigned)in.op]) {
      binary_done[(unsigned)in.op] = true;
      s << "float rlx_b" << (unsigned)in.op << "(float a, float b) { return " << ew_glsl(in.op) << "; }  // " << ew_name(in.op) << "\n";
    }
  }
  // f16/bf16 operands are 2-byte bit patterns (uint16_t), widened on load, rounded on store.
  auto elem = [&](size_t j) { return kind(j) ? "uint16_t" : "float"; };
  for (size_t j = 0; j < n; ++j)
    s << "layout(std430, binding = " << j << ") restrict readonly buffer In" << j << " { " << elem(j) << " d[]; } in"
      << j << ";\n";
  s << "layout(std430, binding = " << n << ") restrict writeonly buffer Out { " << elem(n) << " d[]; } out0;\n";
  s << "layout(push_constant) uniform PC { uint n; uint dims[" << l.rank << "]; uint off[" << n + 1 << "]; } pc;\n";
  s << "void apply(uint i) {\n";
  bool need_coords = false;
  for (size_t j = 0; j < n; ++j) {
    std::string e = index_expr(l.varies[j], l.rank);
    need_coords = need_coords || (e != "i" && e != "0u");
  }
  if (need_coords) {
    s << "  uint rem = i;\n";
    for (int d = (int)l.rank - 1; d >= 0; --d)
      s << "  uint c" << d << " = rem % pc.dims[" << d << "]; rem /= pc.dims[" << d << "];\n";
  }
  for (size_t r = 0; r < p.code.size(); ++r) {
    const FusedInstr& in = p.code[r];
    s << "  float r" << r << " = ";
    switch (in.kind) {
      case FusedInstr::Load: {
        std::string ld = "in" + std::to_string(in.a) + ".d[pc.off[" + std::to_string(in.a) + "] + " +
                         index_expr(l.varies[in.a], l.rank) + "]";
        if (kind(in.a)) s << "rlx_from16(" << kind(in.a) << "u, uint(" << ld << "))";
        else s << ld;
        break;
      }
      case FusedInstr::Const: {
        uint32_t bits;
        std::memcpy(&bits, &in.imm, 4);
        s << "uintBitsToFloat(" << bits << "u)";
        break;
      }
      case FusedInstr::Unary: s << "rlx_u" << (unsigned)in.op << "(r" << in.a << ")"; break;
      case FusedInstr::Binary:
        s << "rlx_b" << (unsigned)in.op << "(r" << in.a << ", r" << in.b << ")";
        break;
    }
    s << ";  // " << (in.kind == FusedInstr::Unary || in.kind == FusedInstr::Binary ? ew_name(in.op) : "") << "\n";
  }
  if (kind(n)) s << "  out0.d[pc.off[" << n << "] + i] = uint16_t(rlx_to16(" << kind(n) << "u, r" << p.result << "));\n}\n";
  else s << "  out0.d[pc.off[" << n << "] + i] = r" << p.result << ";\n}\n";
  // EPT elements per invocation, a work group apart (as the static elementwise shaders)
  s << "void main() {\n  uint base = rlx_group_index() * " << kEwGroup * kEwPerInvocation
    << "u + gl_LocalInvocationID.x;\n  for (uint e = 0u; e < " << kEwPerInvocation << "u; ++e) {\n"
    << "    uint i = base + e * " << kEwGroup << "u;\n    if (i < pc.n) apply(i);\n  }\n}\n";
  return s.str();
}

std::string FusedCodegen::shader(const FusedProgram& p, const FusedLayout& layout) {
  std::string key = "fused:" + p.key() + layout_key(layout);
  if (pipes_.has_shader(key)) return key;
  const std::string glsl = fused_glsl(p, layout);
  // SPIR-V from the persistent cache (keyed by the GLSL itself and this build, so glslang
  // and the generator are the same), else compiled now and stored.
  io::BlobCache* disk = io::active_cache();
  const std::string disk_key = "spirv\n" + io::build_id() + "\n" + glsl;
  std::vector<uint32_t> spirv;
  if (disk) {
    io::BlobCache::Lookup hit = disk->get("spirv", disk_key);
    if (hit.data) {  // authenticated by its MAC; still checked as SPIR-V before the driver sees it
      if (hit.data->size() % 4 == 0) {
        spirv.resize(hit.data->size() / 4);
        std::memcpy(spirv.data(), hit.data->data(), hit.data->size());
      }
      std::string why = hit.data->size() % 4 ? "not SPIR-V (not whole words)" : spirv_problem(spirv);
      if (!why.empty()) {
        spirv.clear();
        hit.problem = disk->entry_path("spirv", disk_key) + ": " + why;
      }
    }
    if (!hit.problem.empty()) io::cache_log().warnings.push_back("compile cache: ignored a bad entry (" + hit.problem + "); rebuilding it");
  }
  if (!spirv.empty()) {
    pipes_.stats.spirv_cached++;
    io::cache_log().hits++;
  } else {
    auto t0 = std::chrono::steady_clock::now();
    spirv = compile_compute_glsl(glsl, "fused kernel " + p.describe());
    pipes_.stats.glslang_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    pipes_.stats.spirv_compiled++;
    if (disk) {
      io::cache_log().misses++;
      std::string err;
      if (disk->put("spirv", disk_key, std::string(reinterpret_cast<const char*>(spirv.data()), spirv.size() * 4), &err))
        io::cache_log().stores++;
      else
        io::cache_log().warnings.push_back("compile cache: could not store SPIR-V: " + err);
    }
  }
  pipes_.add_shader(key, std::move(spirv));
  return key;
}

}  // namespace rlx::vk
