#include "runtime/compare.h"

#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rlx {

Combo parse_combo(const std::string& s) {
  auto c = s.find(':');
  if (c == std::string::npos) throw InputError("--reference " + s + ": expected MODE:BACKEND, e.g. eager:cpu");
  return {parse_mode(s.substr(0, c), "--reference"), s.substr(c + 1)};
}

bool CompareReport::ok() const {
  for (const auto& r : results)
    if (!r.skipped && (!r.error.empty() || !r.within_tolerance)) return false;
  return true;
}

namespace {

struct RunOut {
  std::vector<Tensor> outs;
  double first = 0, steady = 0;
};

RunOut run_combo(const Loaded& L, Executor& ex, Mode mode, const SessionOptions& so) {
  Session s(L.graph, ex, L.params, so);
  for (const auto& [id, t] : L.inputs) s.set_input(id, t);
  RunOut r;
  r.outs = s.run(mode);
  r.first = s.last_stats().seconds;
  // Steady state is the third run: a compiled plan's second run records the replay (and on the
  // CPU packs weights for it), a one-time cost that took Swin-T's "steady" time from 78 to 397 ms.
  for (int k = 0; k < 2; ++k) s.run(mode);
  r.steady = s.last_stats().seconds;
  return r;
}

}  // namespace

CompareReport compare_combinations(const Loaded& L, const CompareOptions& o) {
  CompareReport rep;
  rep.reference = o.reference.name();
  std::map<std::string, std::unique_ptr<Executor>> executors;
  std::map<std::string, std::string> unavailable;
  auto executor = [&](const std::string& b) -> Executor* {
    if (executors.count(b)) return executors[b].get();
    if (unavailable.count(b)) return nullptr;
    try {
      executors[b] = make_executor(b, o.device);
      return executors[b].get();
    } catch (const RuntimeError& e) {
      unavailable[b] = e.what();
      return nullptr;
    }
  };
  Executor* ref_ex = executor(o.reference.backend);
  if (!ref_ex)
    throw RuntimeError("reference " + rep.reference + " cannot run: " + unavailable[o.reference.backend]);
  RunOut ref = run_combo(o.reference_binding ? *o.reference_binding : L, *ref_ex, o.reference.mode, o.session);
  const ir::Graph& g = *L.graph;
  for (const auto& b : o.backends)
    for (Mode m : o.modes) {
      ComboResult r;
      r.combo = {m, b};
      Executor* ex = executor(b);
      if (!ex) {
        r.skipped = true;
        r.skip_reason = unavailable[b];
        rep.results.push_back(r);
        continue;
      }
      try {
        RunOut got = run_combo(L, *ex, m, o.session);
        r.first_seconds = got.first;
        r.steady_seconds = got.steady;
        for (size_t k = 0; k < got.outs.size(); ++k) {
          OutputMetrics om{g.nodes[g.outputs[k]].id, compare_tensors(got.outs[k], ref.outs[k], o.atol, o.rtol)};
          r.within_tolerance = r.within_tolerance && om.diff.ok();
          r.metrics.push_back(om);
        }
      } catch (const Error& e) {
        r.error = e.what();
        r.within_tolerance = false;
      }
      rep.results.push_back(r);
    }
  return rep;
}

std::string CompareReport::text() const {
  std::ostringstream s;
  s << "reference: " << reference << "\n";
  s << fmt::format("{:<18} {:<14} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}  {}\n", "combination", "output",
                   "max_abs", "max_rel", "nmse", "cosine", "first_ms", "steady_ms", "status");
  for (const auto& r : results) {
    if (r.skipped) {
      s << fmt::format("{:<18} SKIPPED: {}\n", r.combo.name(), r.skip_reason);
      continue;
    }
    if (!r.error.empty()) {
      s << fmt::format("{:<18} FAILED: {}\n", r.combo.name(), r.error);
      continue;
    }
    for (const auto& m : r.metrics)
      s << fmt::format("{:<18} {:<14} {:>11.3g} {:>11.3g} {:>11.3g} {:>11.8f} {:>11.3f} {:>11.3f}  {}\n",
                       r.combo.name(), m.output, m.diff.max_abs, m.diff.max_rel, m.diff.nmse, m.diff.cosine,
                       r.first_seconds * 1e3, r.steady_seconds * 1e3, m.diff.ok() ? "ok" : "MISMATCH");
  }
  s << (ok() ? "all combinations agree within tolerance\n" : "some combinations are outside tolerance\n");
  return s.str();
}

std::string CompareReport::json() const {
  nlohmann::json j;
  j["reference"] = reference;
  j["ok"] = ok();
  j["results"] = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::json e;
    e["mode"] = mode_name(r.combo.mode);
    e["backend"] = r.combo.backend;
    e["status"] = r.skipped ? "skipped" : !r.error.empty() ? "failed" : r.within_tolerance ? "ok" : "mismatch";
    if (r.skipped) e["reason"] = r.skip_reason;
    if (!r.error.empty()) e["error"] = r.error;
    e["first_ms"] = r.first_seconds * 1e3;
    e["steady_ms"] = r.steady_seconds * 1e3;
    e["outputs"] = nlohmann::json::array();
    for (const auto& m : r.metrics)
      e["outputs"].push_back({{"name", m.output}, {"max_abs", m.diff.max_abs}, {"max_rel", m.diff.max_rel},
                              {"nmse", m.diff.nmse}, {"cosine", m.diff.cosine}, {"mismatched", m.diff.bad},
                              {"ok", m.diff.ok()}});
    j["results"].push_back(e);
  }
  return j.dump(2) + "\n";
}

std::string CompareReport::csv() const {
  std::ostringstream s;
  s << "mode,backend,output,max_abs,max_rel,nmse,cosine,first_ms,steady_ms,status\n";
  for (const auto& r : results) {
    std::string status = r.skipped ? "skipped" : !r.error.empty() ? "failed" : "";
    if (r.metrics.empty()) {
      s << fmt::format("{},{},,,,,,,,{}\n", mode_name(r.combo.mode), r.combo.backend, status);
      continue;
    }
    for (const auto& m : r.metrics)
      s << fmt::format("{},{},{},{:.6g},{:.6g},{:.6g},{:.9f},{:.4f},{:.4f},{}\n", mode_name(r.combo.mode),
                       r.combo.backend, m.output, m.diff.max_abs, m.diff.max_rel, m.diff.nmse, m.diff.cosine,
                       r.first_seconds * 1e3, r.steady_seconds * 1e3, m.diff.ok() ? "ok" : "mismatch");
  }
  return s.str();
}

}  // namespace rlx
