#include "runtime/bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <numeric>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "ir/op_registry.h"

namespace rlx {

double graph_flops(const ir::Graph& g, const ir::TypedShapes& ts) {
  double f = 0;
  for (int i = 0; i < (int)g.nodes.size(); ++i) f += ir::node_flops(g, i, ts);
  return f;
}

double graph_bytes(const ir::Graph& g, const ir::TypedShapes& ts) {
  // Each leaf is read once and each computed value written once and read by its users:
  // the traffic of an unfused execution with f32 tensors.
  double b = 0;
  for (int i = 0; i < (int)g.nodes.size(); ++i) {
    const auto& n = g.nodes[i];
    if (ir::op_info(n.op).category == ir::Category::Leaf) continue;
    b += 4.0 * shape_numel(ts.shapes[i]);
    for (int u : n.inputs) b += 4.0 * shape_numel(ts.shapes[u]);
  }
  return b;
}

namespace {

double peak_rss_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  double pos = p * (v.size() - 1);
  size_t lo = (size_t)std::floor(pos), hi = (size_t)std::ceil(pos);
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

}  // namespace

bool BenchReport::ok() const {
  for (const auto& r : rows)
    if (!r.error.empty()) return false;
  return true;
}

BenchReport run_bench(const Loaded& L, const BenchOptions& o) {
  BenchReport rep;
  rep.graph = L.graph->file;
  {
    std::map<std::string, Shape> shapes;
    for (const auto& [id, t] : L.inputs) shapes[id] = t.shape();
    auto ts = ir::infer_shapes(*L.graph, shapes);
    rep.flops = graph_flops(*L.graph, ts);
    rep.bytes = graph_bytes(*L.graph, ts);
  }
  int total = (int)(o.modes.size() * o.backends.size()), done = 0;
  for (const auto& b : o.backends) {
    std::unique_ptr<Executor> ex;
    std::string why;
    try {
      ex = make_executor(b, o.device);
    } catch (const RuntimeError& e) {
      why = e.what();
    }
    for (Mode m : o.modes) {
      BenchRow r;
      r.combo = {m, b};
      done++;
      if (!ex) {
        r.skipped = why;
        rep.rows.push_back(r);
        continue;
      }
      r.device = ex->description();
      std::cerr << fmt::format("[{}/{}] {} ...", done, total, r.combo.name()) << std::flush;
      try {
        Session s(L.graph, *ex, L.params, o.session);
        for (const auto& [id, t] : L.inputs) s.set_input(id, t);
        s.run(m);
        r.first_ms = s.last_stats().seconds * 1e3;
        for (int w = 0; w < o.warmup; ++w) s.run(m);
        std::vector<double> t;
        for (int k = 0; k < o.reps; ++k) {
          s.run(m);
          t.push_back(s.last_stats().seconds * 1e3);
        }
        r.median_ms = percentile(t, 0.5);
        r.p10_ms = percentile(t, 0.1);
        r.p90_ms = percentile(t, 0.9);
        double mean = std::accumulate(t.begin(), t.end(), 0.0) / t.size(), var = 0;
        for (double x : t) var += (x - mean) * (x - mean);
        r.stddev_ms = std::sqrt(var / t.size());
        r.gflops = rep.flops / (r.median_ms * 1e-3) / 1e9;
        r.gbps = rep.bytes / (r.median_ms * 1e-3) / 1e9;
        r.kernels = s.last_stats().kernels;
        r.peak_mib = s.last_stats().peak_bytes / 1048576.0;
        r.rss_mib = peak_rss_mib();
        std::cerr << fmt::format(" median {:.3f} ms\n", r.median_ms);
      } catch (const Error& e) {
        r.error = e.what();
        std::cerr << " failed: " << e.what() << "\n";
      }
      rep.rows.push_back(r);
    }
  }
  return rep;
}

std::string BenchReport::markdown() const {
  std::ostringstream s;
  s << fmt::format("graph: {}  ({:.3f} GFLOP, {:.1f} MB moved per run, unfused)\n\n", graph, flops / 1e9, bytes / 1e6);
  s << "| mode | backend | first ms | median ms | p10 ms | p90 ms | stddev ms | GFLOP/s | GB/s | kernels | plan peak MiB | RSS MiB |\n";
  s << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& r : rows) {
    if (!r.skipped.empty() || !r.error.empty()) {
      s << fmt::format("| {} | {} | {} |||||||||| \n", mode_name(r.combo.mode), r.combo.backend,
                       r.skipped.empty() ? "FAILED: " + r.error : "skipped: " + r.skipped);
      continue;
    }
    s << fmt::format("| {} | {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.2f} | {:.2f} | {} | {:.1f} | {:.1f} |\n",
                     mode_name(r.combo.mode), r.combo.backend, r.first_ms, r.median_ms, r.p10_ms, r.p90_ms,
                     r.stddev_ms, r.gflops, r.gbps, r.kernels, r.peak_mib, r.rss_mib);
  }
  return s.str();
}

std::string BenchReport::json() const {
  nlohmann::json j;
  j["graph"] = graph;
  j["flops"] = flops;
  j["bytes"] = bytes;
  j["rows"] = nlohmann::json::array();
  for (const auto& r : rows)
    j["rows"].push_back({{"mode", mode_name(r.combo.mode)}, {"backend", r.combo.backend}, {"device", r.device},
                         {"skipped", r.skipped}, {"error", r.error}, {"first_ms", r.first_ms},
                         {"median_ms", r.median_ms}, {"p10_ms", r.p10_ms}, {"p90_ms", r.p90_ms},
                         {"stddev_ms", r.stddev_ms}, {"gflops", r.gflops}, {"gbps", r.gbps}, {"kernels", r.kernels},
                         {"plan_peak_mib", r.peak_mib}, {"rss_mib", r.rss_mib}});
  return j.dump(2) + "\n";
}

std::string BenchReport::csv() const {
  std::ostringstream s;
  s << "mode,backend,first_ms,median_ms,p10_ms,p90_ms,stddev_ms,gflops,gbps,kernels,plan_peak_mib,rss_mib,status\n";
  for (const auto& r : rows)
    s << fmt::format("{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.3f},{:.3f},{},{:.2f},{:.2f},{}\n",
                     mode_name(r.combo.mode), r.combo.backend, r.first_ms, r.median_ms, r.p10_ms, r.p90_ms,
                     r.stddev_ms, r.gflops, r.gbps, r.kernels, r.peak_mib, r.rss_mib,
                     !r.skipped.empty() ? "skipped" : !r.error.empty() ? "failed" : "ok");
  return s.str();
}

std::string format_profile(const std::vector<ProfileEntry>& p) {
  std::vector<ProfileEntry> v = p;
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  double total = 0;
  for (const auto& e : v) total += e.seconds;
  std::ostringstream s;
  s << fmt::format("{:>10} {:>6} {:>10} {:>10}  {:<14} {}\n", "ms", "%", "GFLOP/s", "GB/s", "op", "kernel");
  for (const auto& e : v)
    s << fmt::format("{:>10.3f} {:>6.1f} {:>10.2f} {:>10.2f}  {:<14} {}\n", e.seconds * 1e3,
                     total > 0 ? 100 * e.seconds / total : 0, e.seconds > 0 ? e.flops / e.seconds / 1e9 : 0,
                     e.seconds > 0 ? e.bytes / e.seconds / 1e9 : 0, e.op, e.label);
  s << fmt::format("{:>10.3f} total over {} kernels\n", total * 1e3, v.size());
  return s.str();
}

}  // namespace rlx
