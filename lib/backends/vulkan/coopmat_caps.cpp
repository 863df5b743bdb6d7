#include "backends/vulkan/coopmat_caps.h"

#include <cstring>

namespace rlx::vk {
namespace {

// From the Vulkan registry (vk.xml), absent from Debian 12's headers.
constexpr VkStructureType kFeaturesKHR = (VkStructureType)1000506000;    // ..._COOPERATIVE_MATRIX_FEATURES_KHR
constexpr VkStructureType kPropsKHR = (VkStructureType)1000506001;       // COOPERATIVE_MATRIX_PROPERTIES_KHR
constexpr VkStructureType kFeatures2NV = (VkStructureType)1000593000;    // ..._COOPERATIVE_MATRIX_2_FEATURES_NV
constexpr VkStructureType kFlexPropsNV = (VkStructureType)1000593001;    // COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV
constexpr VkStructureType kProps2NV = (VkStructureType)1000593002;       // ..._COOPERATIVE_MATRIX_2_PROPERTIES_NV
constexpr VkStructureType kBf16Features = (VkStructureType)1000141000;   // ..._SHADER_BFLOAT16_FEATURES_KHR
constexpr uint32_t kF16 = 0, kF32 = 1, kBF16 = 1000141000;  // VkComponentTypeKHR
constexpr uint32_t kScopeWorkgroup = 2, kScopeSubgroup = 3;              // VkScopeKHR

struct PropsKHR {  // VkCooperativeMatrixPropertiesKHR
  VkStructureType sType;
  void* pNext;
  uint32_t MSize, NSize, KSize, AType, BType, CType, ResultType;
  VkBool32 saturatingAccumulation;
  uint32_t scope;
};
struct FlexPropsNV {  // VkCooperativeMatrixFlexibleDimensionsPropertiesNV
  VkStructureType sType;
  void* pNext;
  uint32_t MGranularity, NGranularity, KGranularity, AType, BType, CType, ResultType;
  VkBool32 saturatingAccumulation;
  uint32_t scope, workgroupInvocations;
};
struct Props2NV {  // VkPhysicalDeviceCooperativeMatrix2PropertiesNV
  VkStructureType sType;
  void* pNext;
  uint32_t workgroupScopeMaxWorkgroupSize, flexibleDimensionsMaxDimension, workgroupScopeReservedSharedMemory;
};
using PFN_propsKHR = VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*, PropsKHR*);
using PFN_flexNV = VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*, FlexPropsNV*);

bool has(const std::vector<VkExtensionProperties>& exts, const char* name) {
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

}  // namespace

void query_coopmat(const Instance& inst, VkPhysicalDevice pd, const std::vector<VkExtensionProperties>& exts,
                   DeviceCaps& c) {
  const VkFns& fn = inst.fn;
  // The prebuilt kernels are SPIR-V 1.6 (GL_NV_cooperative_matrix2 needs it): Vulkan 1.3.
  VkPhysicalDeviceProperties p0;
  fn.vkGetPhysicalDeviceProperties(pd, &p0);
  c.spirv16 = p0.apiVersion >= VK_API_VERSION_1_3 && inst.api_version >= VK_API_VERSION_1_3;
  bool khr = has(exts, "VK_KHR_cooperative_matrix"), nv2 = has(exts, "VK_NV_cooperative_matrix2"),
       bf = has(exts, "VK_KHR_shader_bfloat16");
  if (!khr || !c.spirv16) return;
  CoopFeaturesKHR f{kFeaturesKHR};
  CoopFeatures2NV f2{kFeatures2NV};
  Bf16FeaturesKHR b{kBf16Features};
  VkPhysicalDeviceMaintenance4Features m4{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_FEATURES};
  VkPhysicalDeviceFeatures2 all{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  all.pNext = &f;
  f.pNext = &m4;
  void** tail = &m4.pNext;
  if (nv2) *tail = &f2, tail = &f2.pNext;
  if (bf) *tail = &b, tail = &b.pNext;
  fn.vkGetPhysicalDeviceFeatures2(pd, &all);
  c.maintenance4 = m4.maintenance4;
  c.coop_khr = f.cooperativeMatrix && c.maintenance4;
  c.bf16_type = bf && b.type;
  c.bf16_coop = bf && b.type && b.cooperativeMatrix;
  c.cm2 = nv2 && c.coop_khr && f2.workgroupScope && f2.flexibleDimensions && f2.tensorAddressing &&
          f2.perElementOperations;
  auto props = (PFN_propsKHR)fn.vkGetInstanceProcAddr(inst.instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
  if (c.coop_khr && props) {
    uint32_t n = 0;
    props(pd, &n, nullptr);
    std::vector<PropsKHR> ps(n, PropsKHR{kPropsKHR});
    props(pd, &n, ps.data());
    for (uint32_t i = 0; i < n; ++i) {
      const auto& q = ps[i];
      if (q.scope != kScopeSubgroup || q.CType != kF32 || q.ResultType != kF32 || q.AType != q.BType) continue;
      if (q.AType == kF16) c.khr_f16.push_back({q.MSize, q.NSize, q.KSize});
      if (q.AType == kBF16) c.khr_bf16.push_back({q.MSize, q.NSize, q.KSize});
    }
  }
  auto flex = (PFN_flexNV)fn.vkGetInstanceProcAddr(inst.instance,
                                                    "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV");
  if (c.cm2 && flex) {
    Props2NV p2{kProps2NV};
    VkPhysicalDeviceProperties2 pp{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    pp.pNext = &p2;
    fn.vkGetPhysicalDeviceProperties2(pd, &pp);
    c.cm2_max_wg = p2.workgroupScopeMaxWorkgroupSize;
    c.cm2_max_dim = p2.flexibleDimensionsMaxDimension;
    c.cm2_reserved_shared = p2.workgroupScopeReservedSharedMemory;
    uint32_t n = 0;
    flex(pd, &n, nullptr);
    std::vector<FlexPropsNV> ps(n, FlexPropsNV{kFlexPropsNV});
    flex(pd, &n, ps.data());
    for (uint32_t i = 0; i < n; ++i) {
      const auto& q = ps[i];
      if (q.scope != kScopeWorkgroup || q.CType != kF32 || q.ResultType != kF32 || q.AType != q.BType) continue;
      DeviceCaps::FlexShape s{q.MGranularity, q.NGranularity, q.KGranularity, q.workgroupInvocations};
      if (q.AType == kF16) c.cm2_f16.push_back(s);
      if (q.AType == kBF16) c.cm2_bf16.push_back(s);
    }
  }
  if (c.cm2_f16.empty() && c.cm2_bf16.empty()) c.cm2 = false;
}

void** CoopmatEnable::chain(const DeviceCaps& c, void** tail, std::vector<const char*>& extensions) {
  if (!c.coop_khr) return tail;
  m4_.maintenance4 = VK_TRUE;  // LocalSizeId (SPIR-V 1.6's work-group size from spec constants)
  *tail = &m4_, tail = &m4_.pNext;
  khr_.sType = kFeaturesKHR;
  khr_.cooperativeMatrix = VK_TRUE;
  *tail = &khr_, tail = &khr_.pNext;
  extensions.push_back("VK_KHR_cooperative_matrix");
  if (c.cm2) {
    cm2_.sType = kFeatures2NV;
    cm2_.workgroupScope = cm2_.flexibleDimensions = cm2_.tensorAddressing = cm2_.perElementOperations = VK_TRUE;
    *tail = &cm2_, tail = &cm2_.pNext;
    extensions.push_back("VK_NV_cooperative_matrix2");
  }
  if (c.bf16_coop) {
    bf16_.sType = kBf16Features;
    bf16_.type = bf16_.cooperativeMatrix = VK_TRUE;
    *tail = &bf16_, tail = &bf16_.pNext;
    extensions.push_back("VK_KHR_shader_bfloat16");
  }
  return tail;
}

}  // namespace rlx::vk
