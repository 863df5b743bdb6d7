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
  // the traffic of an unfused execution, each tensor in its dtype's bytes.
  double b = 0;
  auto bytes = [&](int i) { return (double)shape_numel(ts.shapes[i]) * (double)dtype_size(ts.dtypes[i]); };
  for (int i = 0; i < (int)g.nodes.size(); ++i) {
    const auto& n = g.nodes[i];
    if (ir::op_info(n.op).category == ir::Category::Leaf) continue;
    b += bytes(i);
    for (int u : n.inputs) b += bytes(u);
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
  // Every mode of a backend is set up first, then the timed runs go round the modes
  // (eager, lazy, compiled, eager, ...): a change in the machine's load during the
  // benchmark hits every mode alike instead of whichever ran at that moment.
  for (const auto& b : o.backends) {
    std::unique_ptr<Executor> ex;
    std::string why;
    try {
      ex = make_executor(b, o.device);
    } catch (const RuntimeError& e) {
      why = e.what();
    }
    struct Live {
      size_t row;
      Mode mode;
      std::unique_ptr<Session> s;
      std::vector<double> t, dev, up_mb, up_ms, down_mb, down_ms;
      bool has_dev = false;
    };
    std::vector<Live> live;
    for (Mode m : o.modes) {
      BenchRow r;
      r.combo = {m, b};
      if (!ex) {
        r.skipped = why;
        rep.rows.push_back(r);
        continue;
      }
      r.device = ex->description();
      std::cerr << fmt::format("[{}] first run and warm-up ...", r.combo.name()) << std::flush;
      try {
        SessionOptions so = o.session;
        so.inputs_constant = true;  // the inputs never change between the timed runs
        auto s = std::make_unique<Session>(L.graph, *ex, L.params, so);
        for (const auto& [id, t] : L.inputs) s->set_input(id, t);
        s->run(m);
        r.first_ms = s->last_stats().seconds * 1e3;
        for (int w = 0; w < o.warmup; ++w) s->run(m);
        r.rss_mib = peak_rss_mib();
        std::cerr << fmt::format(" first {:.3f} ms\n", r.first_ms);
        live.push_back({rep.rows.size(), m, std::move(s), {}});
      } catch (const Error& e) {
        r.error = e.what();
        std::cerr << " failed: " << e.what() << "\n";
      }
      rep.rows.push_back(r);
    }
    for (int k = 0; k < o.reps; ++k)
      for (auto& l : live) {
        if (!rep.rows[l.row].error.empty()) continue;
        try {
          ex->take_device_stats();  // what the other modes left
          l.s->run(l.mode);
          l.t.push_back(l.s->last_stats().seconds * 1e3);
          DeviceStats d = ex->take_device_stats();
          l.has_dev = d.has_device_time;
          l.dev.push_back(d.device_s * 1e3);
          l.up_mb.push_back(d.upload_bytes / 1e6);
          l.up_ms.push_back(d.upload_s * 1e3);
          l.down_mb.push_back(d.download_bytes / 1e6);
          l.down_ms.push_back(d.download_s * 1e3);
        } catch (const Error& e) {
          rep.rows[l.row].error = e.what();
          std::cerr << fmt::format("[{}] failed: {}\n", rep.rows[l.row].combo.name(), e.what());
        }
      }
    for (auto& l : live) {
      BenchRow& r = rep.rows[l.row];
      if (!r.error.empty()) continue;
      const auto& t = l.t;
      r.median_ms = percentile(t, 0.5);
      r.p10_ms = percentile(t, 0.1);
      r.p90_ms = percentile(t, 0.9);
      r.min_ms = *std::min_element(t.begin(), t.end());
      double mean = std::accumulate(t.begin(), t.end(), 0.0) / t.size(), var = 0;
      for (double x : t) var += (x - mean) * (x - mean);
      r.stddev_ms = std::sqrt(var / t.size());
      r.gflops = rep.flops / (r.median_ms * 1e-3) / 1e9;
      r.gbps = rep.bytes / (r.median_ms * 1e-3) / 1e9;
      r.kernels = l.s->last_stats().kernels;
      r.peak_mib = l.s->last_stats().peak_bytes / 1048576.0;
      if (l.has_dev) r.device_ms = percentile(l.dev, 0.5);
      r.upload_mb = percentile(l.up_mb, 0.5);
      r.upload_ms = percentile(l.up_ms, 0.5);
      r.download_mb = percentile(l.down_mb, 0.5);
      r.download_ms = percentile(l.down_ms, 0.5);
      std::cerr << fmt::format("[{}] median {:.3f} ms\n", r.combo.name(), r.median_ms);
    }
  }
  return rep;
}

std::string BenchReport::markdown() const {
  std::ostringstream s;
  s << fmt::format("graph: {}  ({:.3f} GFLOP, {:.1f} MB moved per run, unfused)\n\n", graph, flops / 1e9, bytes / 1e6);
  s << "| mode | backend | first ms | median ms | device ms | p10 ms | p90 ms | stddev ms | GFLOP/s | GB/s | upload MB | "
       "upload ms | download MB | download ms | kernels | plan peak MiB | RSS MiB |\n";
  s << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& r : rows) {
    if (!r.skipped.empty() || !r.error.empty()) {
      s << fmt::format("| {} | {} | {} |||||||||||||||\n", mode_name(r.combo.mode), r.combo.backend,
                       r.skipped.empty() ? "FAILED: " + r.error : "skipped: " + r.skipped);
      continue;
    }
    std::string dev = r.device_ms >= 0 ? fmt::format("{:.3f}", r.device_ms) : "-";
    s << fmt::format(
        "| {} | {} | {:.3f} | {:.3f} | {} | {:.3f} | {:.3f} | {:.3f} | {:.2f} | {:.2f} | {:.1f} | {:.3f} | {:.1f} | "
        "{:.3f} | {} | {:.1f} | {:.1f} |\n",
        mode_name(r.combo.mode), r.combo.backend, r.first_ms, r.median_ms, dev, r.p10_ms, r.p90_ms, r.stddev_ms,
        r.gflops, r.gbps, r.upload_mb, r.upload_ms, r.download_mb, r.download_ms, r.kernels, r.peak_mib, r.rss_mib);
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
                         {"stddev_ms", r.stddev_ms}, {"min_ms", r.min_ms}, {"gflops", r.gflops}, {"gbps", r.gbps}, {"kernels", r.kernels},
                         {"device_ms", r.device_ms >= 0 ? nlohmann::json(r.device_ms) : nlohmann::json(nullptr)},
                         {"upload_mb", r.upload_mb}, {"upload_ms", r.upload_ms}, {"download_mb", r.download_mb},
                         {"download_ms", r.download_ms},
                         {"plan_peak_mib", r.peak_mib}, {"rss_mib", r.rss_mib}});
  return j.dump(2) + "\n";
}

std::string BenchReport::csv() const {
  std::ostringstream s;
  s << "mode,backend,first_ms,median_ms,p10_ms,p90_ms,stddev_ms,gflops,gbps,kernels,plan_peak_mib,rss_mib,"
       "device_ms,upload_mb,upload_ms,download_mb,download_ms,status\n";
  for (const auto& r : rows)
    s << fmt::format("{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.3f},{:.3f},{},{:.2f},{:.2f},{},{:.3f},{:.4f},{:.3f},{:.4f},{}\n",
                     mode_name(r.combo.mode), r.combo.backend, r.first_ms, r.median_ms, r.p10_ms, r.p90_ms,
                     r.stddev_ms, r.gflops, r.gbps, r.kernels, r.peak_mib, r.rss_mib,
                     r.device_ms >= 0 ? fmt::format("{:.4f}", r.device_ms) : "", r.upload_mb, r.upload_ms,
                     r.download_mb, r.download_ms,
                     !r.skipped.empty() ? "skipped" : !r.error.empty() ? "failed" : "ok");
  return s.str();
}

std::string format_profile(const std::vector<ProfileEntry>& p) {
  std::vector<ProfileEntry> v = p;
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  double total = 0, moved_s = 0, moved_b = 0;
  size_t kernels = 0, transfers = 0;
  for (const auto& e : v) {
    if (e.op == "transfer") moved_s += e.seconds, moved_b += e.bytes, ++transfers;
    else total += e.seconds, ++kernels;
  }
  std::ostringstream s;
  s << fmt::format("{:>10} {:>6} {:>10} {:>10}  {:<14} {}\n", "ms", "%", "GFLOP/s", "GB/s", "op", "kernel");
  for (const auto& e : v)
    s << fmt::format("{:>10.3f} {:>6.1f} {:>10.2f} {:>10.2f}  {:<14} {}\n", e.seconds * 1e3,
                     total > 0 ? 100 * e.seconds / total : 0, e.seconds > 0 ? e.flops / e.seconds / 1e9 : 0,
                     e.seconds > 0 ? e.bytes / e.seconds / 1e9 : 0, e.op, e.label);
  s << fmt::format("{:>10.3f} total over {} kernels\n", total * 1e3, kernels);
  if (transfers)
    s << fmt::format("{:>10.3f} in {} host<->device transfers, {:.1f} MB, {:.2f} GB/s\n", moved_s * 1e3, transfers,
                     moved_b / 1e6, moved_s > 0 ? moved_b / moved_s / 1e9 : 0);
  return s.str();
}

}  // namespace rlx
