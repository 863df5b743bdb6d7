// The importer's operator table as documentation: which ONNX operators map onto which registry
// ops, read from the rows the family files register (importer.h's OpDef). docs/onnx.md is
// generated from it (`rlx onnx-ops --markdown`), and the node-test driver reads it to
// tell supported cases from skipped ones. A row's `needs` lists the registry ops its mapping
// uses that this build does not have (their nodes are refused with exit 2 until they land).
#include "ir/op_registry.h"
#include "onnx/importer.h"

namespace rlx::onnx {

std::vector<OpSupport> supported_ops() {
  std::vector<OpSupport> r;
  for (const auto& row : op_table()) {
    if (!row.maps_to) continue;  // another opset's row of an operator listed already
    OpSupport s{row.op_type, row.maps_to, {}, row.notes};
    std::string req = row.required, w;
    for (size_t i = 0; i <= req.size(); ++i) {
      if (i == req.size() || req[i] == ' ') {
        if (!w.empty() && !ir::op_from_name(w)) s.needs.push_back(w);
        w.clear();
      } else {
        w += req[i];
      }
    }
    r.push_back(std::move(s));
  }
  return r;
}

}  // namespace rlx::onnx
