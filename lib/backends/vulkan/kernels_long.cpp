// Lines too long for one shader invocation to walk (issue 30): llvmpipe (lavapipe, a device that
// JITs shaders for the host) ends an invocation's loops after 65535 iterations in all, silently
// (Mesa's LP_MAX_TGSI_LOOP_ITERATIONS: one counter per group of SIMD lanes, decremented at the end
// of every loop iteration of every loop), so argmax/argmin, cumsum, topk (axis_op.comp) and
// min/prod (reduce_ext.comp) along more than kMaxWalk elements run here in passes, by one of two
// routes (kernels.h's long_wg) for argmax/argmin and cumsum (min/prod likewise in kernels_index.cpp):
// serial on a CPU device (one invocation walks each chunk of serial_chunk() elements,
// shaders/axis_long.comp: llvmpipe runs these 1.4-7x faster than work groups, docs/benchmarks.md
// session 15), work groups elsewhere (256 invocations per chunk of wg_chunk(), shaders/axis_wg.comp:
// two-level combines in shared memory, cumsum reduce-then-scan); topk as runs and merges whose
// invocations each walk a bounded part (shaders/axis_long.comp), on every device.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/vulkan/kernels.h"

namespace rlx::vk {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct LongLine {
  int64_t lines, len, inner;
};

// axis_long.comp's push constants (its PC block, in order).
struct AxisLongPush {
  uint32_t lines = 0, len = 0, inner = 1, k = 0, xoff = 0, yoff = 0, flags = 0;
  uint32_t span = 0, nchunks = 0, cap_in = 0, nout = 0, cap_out = 0, pioff = 0, pooff = 0;
};

// Binds t to d (read or written); its offset. An absent input binds the dummy buffer; an absent
// output a word of scratch of its own: the shaders write their outputs under a flag, and the
// validation layer, which sees every binding a shader may write as written, would otherwise see
// the shared dummy written by one dispatch and read by the next with no barrier between.
uint32_t bind(LowerCtx& L, Dispatch& d, const TensorRef* t, bool write) {
  if (t) return write ? L.write(d, *t) : L.read(d, *t);
  if (write) return L.write(d, L.scratch(1));
  L.bind_dummy(d);
  return 0;
}

// One axis_long.comp dispatch of `items` invocations; absent tensors bind the dummy buffer.
void dispatch(LowerCtx& L, uint32_t op, const TensorRef* x, const TensorRef* y, const TensorRef* pin,
              const TensorRef* pout, AxisLongPush p, int64_t items) {
  Dispatch& d = L.add("axis_long", {op});
  p.xoff = bind(L, d, x, false);
  p.yoff = bind(L, d, y, true);
  p.pioff = bind(L, d, pin, false);
  p.pooff = bind(L, d, pout, true);
  d.push = {p.lines, p.len, p.inner, p.k, p.xoff, p.yoff, p.flags, p.span, p.nchunks, p.cap_in, p.nout, p.cap_out,
            p.pioff, p.pooff};
  L.grid(d, (uint64_t)items, 64);
}

// ---- The serial route (CPU devices): one invocation walks each chunk.
// argmax (op 0) / argmin (op 1): each line's best of every chunk of serial_chunk() elements as
// (value, index) pairs, then the best of those pairs by chunks again until one per line is left.
void arg_serial(LowerCtx& L, uint32_t op, const LongLine& v, uint32_t flags) {
  const Kernel& k = L.kernel();
  const int64_t chunk = serial_chunk();
  AxisLongPush p;
  p.lines = (uint32_t)v.lines;
  p.len = (uint32_t)v.len;
  p.inner = (uint32_t)v.inner;
  p.span = (uint32_t)chunk;
  int64_t n = ceil_div(v.len, chunk);
  p.nchunks = (uint32_t)n;
  p.flags = flags;
  TensorRef pairs = L.scratch(2 * v.lines * n);
  dispatch(L, op, &k.inputs[0], nullptr, nullptr, &pairs, p, v.lines * n);
  while (true) {
    const int64_t m = ceil_div(n, chunk);
    AxisLongPush q;
    q.lines = (uint32_t)v.lines;
    q.len = (uint32_t)n;  // pairs per line
    q.span = (uint32_t)std::min<int64_t>(n, chunk);
    q.nchunks = (uint32_t)m;
    q.flags = (flags & 1u) | 4u | (m == 1 ? 8u : 0u);
    if (m == 1) {
      dispatch(L, op, nullptr, &k.output, &pairs, nullptr, q, v.lines);
      return;
    }
    TensorRef next = L.scratch(2 * v.lines * m);
    dispatch(L, op, nullptr, nullptr, &pairs, &next, q, v.lines * m);
    pairs = next;
    n = m;
  }
}

// cumsum along `v` of x into y (both laid out as [outer, len, inner]): the Kahan sum of every
// chunk of serial_chunk() scan positions, their exclusive scan (a cumsum of its own, by this route
// again when that line is long too), then every chunk scanned from its offset.
void cumsum_serial(LowerCtx& L, const TensorRef& x, const TensorRef& y, const LongLine& v, uint32_t flags);

void cumsum_any(LowerCtx& L, const TensorRef& x, const TensorRef& y, const LongLine& v, uint32_t flags) {
  if (v.len > long_from()) return cumsum_serial(L, x, y, v, flags);
  Dispatch& d = L.add("axis_op", {2u});
  uint32_t xo = L.read(d, x), yo = L.write(d, y);
  d.push = {(uint32_t)v.lines, (uint32_t)v.len, (uint32_t)v.inner, 0u, xo, yo, flags};
  L.grid(d, (uint64_t)v.lines, 64);
}

void cumsum_serial(LowerCtx& L, const TensorRef& x, const TensorRef& y, const LongLine& v, uint32_t flags) {
  const int64_t chunk = serial_chunk();
  const int64_t n = ceil_div(v.len, chunk);
  AxisLongPush p;
  p.lines = (uint32_t)v.lines;
  p.len = (uint32_t)v.len;
  p.inner = (uint32_t)v.inner;
  p.span = (uint32_t)chunk;
  p.nchunks = (uint32_t)n;
  p.flags = flags;
  TensorRef sums = L.scratch(v.lines * n), offsets = L.scratch(v.lines * n);
  sums.shape = offsets.shape = {v.lines, n};
  dispatch(L, 2, &x, nullptr, nullptr, &sums, p, v.lines * n);
  cumsum_any(L, sums, offsets, {v.lines, n, 1}, 1u);  // exclusive, forward
  dispatch(L, 3, &x, &y, &offsets, nullptr, p, v.lines * n);
}

// ---- The wg route (GPUs): a work group of 256 invocations per chunk.
// One axis_wg.comp dispatch: a work group of 256 invocations per (line, chunk of wg_chunk
// elements of `len`), `lines` lines of [outer, len, inner] (inner 1 for pairs and block sums).
void dispatch_wg(LowerCtx& L, uint32_t op, const TensorRef* x, const TensorRef* y, const TensorRef* pin,
                 const TensorRef* pout, int64_t lines, int64_t len, int64_t inner, uint32_t flags) {
  const int64_t chunk = wg_chunk(L.caps(), op >= 2);
  const uint32_t per = (uint32_t)(chunk / 256);
  Dispatch& d = L.add("axis_wg", {op, per, op == 3 ? per : 1u});
  const int64_t n = ceil_div(len, chunk);
  const uint32_t xo = bind(L, d, x, false), yo = bind(L, d, y, true), pio = bind(L, d, pin, false),
                 poo = bind(L, d, pout, true);
  d.push = {(uint32_t)lines, (uint32_t)len, (uint32_t)inner, xo, yo, flags, (uint32_t)n, pio, poo};
  L.grid(d, (uint64_t)(lines * n) * 256, 256);
}

// argmax (op 0) / argmin (op 1): each line's best (value, index) of every chunk of wg_chunk
// elements (one work group each), then the best of those pairs by chunks again until one per
// line is left.
void arg_wg(LowerCtx& L, uint32_t op, const LongLine& v, uint32_t flags) {
  const Kernel& k = L.kernel();
  const int64_t chunk = wg_chunk(L.caps(), false);
  int64_t n = ceil_div(v.len, chunk);
  TensorRef pairs = L.scratch(2 * v.lines * n);
  dispatch_wg(L, op, &k.inputs[0], nullptr, nullptr, &pairs, v.lines, v.len, v.inner, flags);
  while (true) {
    const int64_t m = ceil_div(n, chunk);
    const uint32_t f = (flags & 1u) | 4u | (m == 1 ? 8u : 0u);
    if (m == 1) {
      dispatch_wg(L, op, nullptr, &k.output, &pairs, nullptr, v.lines, n, 1, f);
      return;
    }
    TensorRef next = L.scratch(2 * v.lines * m);
    dispatch_wg(L, op, nullptr, nullptr, &pairs, &next, v.lines, n, 1, f);
    pairs = next;
    n = m;
  }
}

// cumsum along `v` of x into y (both laid out as [outer, len, inner]), reduce-then-scan: the sum
// of every chunk of wg_chunk(caps, true) scan positions (one work group each), their exclusive
// scan (by this route again: [lines, chunks] scanned along its rows), then every chunk scanned by
// its work group from its offset. A line of at most one chunk is one work group's scan from 0.
void cumsum_wg(LowerCtx& L, const TensorRef& x, const TensorRef& y, const LongLine& v, uint32_t flags) {
  const int64_t chunk = wg_chunk(L.caps(), true);
  if (v.len <= chunk) return dispatch_wg(L, 3, &x, &y, nullptr, nullptr, v.lines, v.len, v.inner, flags | 16u);
  const int64_t n = ceil_div(v.len, chunk);
  TensorRef sums = L.scratch(v.lines * n), offsets = L.scratch(v.lines * n);
  sums.shape = offsets.shape = {v.lines, n};
  dispatch_wg(L, 2, &x, nullptr, nullptr, &sums, v.lines, v.len, v.inner, flags);
  cumsum_wg(L, sums, offsets, {v.lines, n, 1}, 1u);  // exclusive, forward
  dispatch_wg(L, 3, &x, &y, &offsets, nullptr, v.lines, v.len, v.inner, flags);
}

// topk: runs of the first min(K, kTopkRun) of every kTopkRun elements (ranked within their
// chunk), then pairs of runs merged (binary searches) into runs of the first K until one run
// per line is left; the last merge writes y.
void topk_long(LowerCtx& L, const LongLine& v, int64_t K, uint32_t flags) {
  const Kernel& k = L.kernel();
  int64_t span = kTopkRun, runs = ceil_div(v.len, span), cap = std::min<int64_t>(K, span);
  AxisLongPush p;
  p.lines = (uint32_t)v.lines;
  p.len = (uint32_t)v.len;
  p.inner = (uint32_t)v.inner;
  p.k = (uint32_t)K;
  p.flags = flags;
  p.span = (uint32_t)span;
  p.nout = (uint32_t)runs;
  p.cap_out = (uint32_t)cap;
  // Two scratch buffers written in turn, each as large as the largest level's runs (a level of an
  // odd number of runs holds one run more than half its runs' elements).
  int64_t most = runs * cap;
  for (int64_t r = runs, s = span; r > 1; r = ceil_div(r, 2), s *= 2) most = std::max(most, r * std::min(K, s));
  const int64_t floats = 2 * v.lines * most;
  TensorRef buf[2] = {L.scratch(floats), L.scratch(floats)};
  dispatch(L, 4, &k.inputs[0], nullptr, nullptr, &buf[0], p, v.lines * v.len);
  for (int cur = 0;; cur ^= 1) {
    const int64_t out_runs = ceil_div(runs, 2), out_cap = std::min<int64_t>(K, 2 * span);
    AxisLongPush q = p;
    q.span = (uint32_t)span;
    q.nchunks = (uint32_t)runs;
    q.cap_in = (uint32_t)cap;
    q.nout = (uint32_t)out_runs;
    q.cap_out = (uint32_t)out_cap;
    if (out_runs == 1) {
      q.flags |= 8u;
      dispatch(L, 5, nullptr, &k.output, &buf[cur], nullptr, q, v.lines * runs * cap);
      return;
    }
    dispatch(L, 5, nullptr, nullptr, &buf[cur], &buf[cur ^ 1], q, v.lines * runs * cap);
    runs = out_runs, cap = out_cap, span *= 2;
  }
}

}  // namespace

bool long_wg(const DeviceCaps& caps) {
  if (const char* e = std::getenv("RLX_VK_LONG_ROUTE"); e && *e) {
    if (std::strcmp(e, "serial") == 0) return false;
    if (std::strcmp(e, "wg") == 0) return true;
  }
  return !caps.cpu;
}

int64_t long_per() {
  if (const char* e = std::getenv("RLX_VK_LONG_PER"); e && *e) {
    const int64_t p = std::atoll(e);
    if (p == 1 || p == 2 || p == 4 || p == 8) return p;
  }
  return 16;
}

int64_t wg_chunk(const DeviceCaps& caps, bool scan) {
  // cumsum's scan stages its chunk (4 bytes an element, 1/32 padding) beside 2 KiB of the rest
  int64_t per = long_per();
  if (scan && (256 * 16 * 4 * 33 / 32 + 2048) > (int64_t)caps.max_shared_bytes) per = std::min<int64_t>(per, 8);
  return 256 * per;
}

int64_t long_from() {
  if (const char* e = std::getenv("RLX_VK_LONG_FROM"); e && *e) {
    const int64_t n = std::atoll(e);
    if (n >= 1 && n < kMaxWalk) return n;
  }
  return kMaxWalk;
}

void lower_axis_long(LowerCtx& L, uint32_t op, const Axis3& a, int64_t K, uint32_t flags) {
  const LongLine v{a.outer * a.inner, a.len, a.inner};
  // The largest scratch (topk's first runs, pairs of 2 words) and index stay within 32 bits.
  if (2 * v.lines * (ceil_div(v.len, kTopkRun) * kTopkRun) >= ((int64_t)1 << 32))
    L.fail("a line of " + std::to_string(v.len) + " elements (" + std::to_string(v.lines) +
           " lines) is too large for 32-bit indexing");
  switch (op) {
    case 0: case 1: return long_wg(L.caps()) ? arg_wg(L, op, v, flags) : arg_serial(L, op, v, flags);
    case 2: {
      const TensorRef &x = L.kernel().inputs[0], &y = L.kernel().output;
      return long_wg(L.caps()) ? cumsum_wg(L, x, y, v, flags) : cumsum_serial(L, x, y, v, flags);
    }
    case 3: topk_long(L, v, K, flags); break;
  }
}

}  // namespace rlx::vk
