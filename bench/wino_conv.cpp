// wino_conv: oneDNN's Winograd against its direct convolution on the 3x3 stride-1 convs of
// ResNet-18/34/50 (C = M = 64..512 at 56..7) and VGG (64..512 at 112..14), batch 1 and 2,
// nChw16c, each algorithm two ways: "whole" (one primitive, oneDNN's OpenMP team of 2) and
// "sliced" (as dnnl_conv_run: one primitive per half of the output channels per image, two
// threads each running theirs on a one-thread team, scratchpads the caller's). Prints direct-
// equivalent GFLOP/s (2 N M C 9 OH OW / time, best of reps) and Winograd's max |difference| from
// direct. docs/benchmarks.md, "Winograd 3x3 convolutions".
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
#include <random>
#define CK(x) do { dnnl_status_t s_ = (x); if (s_ != dnnl_success) { return nullptr; } } while (0)
static dnnl_engine_t eng;
struct P { dnnl_primitive_t p; dnnl_memory_t s, w, b, d, scr; std::string impl; };
// conv N x C x H x W -> M, 3x3 pad 1 stride 1, on src pointer / dst pointer (nChw16c)
P* make(int N, int C, int M, int H, dnnl_alg_kind_t alg, float* src, float* wt, float* bias, float* dst) {
  dnnl_memory_desc_t sd, wa, wu, bd, dd;
  dnnl_dims_t s = {N, C, H, H}, w = {M, C, 3, 3}, b = {M}, d = {N, M, H, H};
  dnnl_dims_t st = {1, 1}, dl = {0, 0}, pd = {1, 1};
  CK(dnnl_memory_desc_init_by_tag(&sd, 4, s, dnnl_f32, dnnl_nChw16c));
  CK(dnnl_memory_desc_init_by_tag(&wa, 4, w, dnnl_f32, dnnl_format_tag_any));
  CK(dnnl_memory_desc_init_by_tag(&wu, 4, w, dnnl_f32, dnnl_oihw));
  CK(dnnl_memory_desc_init_by_tag(&bd, 1, b, dnnl_f32, dnnl_x));
  CK(dnnl_memory_desc_init_by_tag(&dd, 4, d, dnnl_f32, dnnl_nChw16c));
  dnnl_convolution_desc_t cd;
  CK(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, alg, &sd, &wa, &bd, &dd, st, dl, pd, pd));
  dnnl_primitive_desc_t pdsc;
  dnnl_primitive_attr_t at; dnnl_primitive_attr_create(&at); dnnl_primitive_attr_set_scratchpad_mode(at, dnnl_scratchpad_mode_user);
  CK(dnnl_primitive_desc_create(&pdsc, &cd, at, eng, nullptr));
  P* r = new P;
  const char* impl; dnnl_primitive_desc_query(pdsc, dnnl_query_impl_info_str, 0, &impl); r->impl = impl;
  const dnnl_memory_desc_t* wmd = dnnl_primitive_desc_query_md(pdsc, dnnl_query_weights_md, 0);
  dnnl_memory_t wuser; dnnl_memory_create(&wuser, &wu, eng, wt);
  dnnl_memory_create(&r->w, wmd, eng, DNNL_MEMORY_ALLOCATE);
  dnnl_primitive_desc_t rpd; dnnl_reorder_primitive_desc_create(&rpd, &wu, eng, wmd, eng, nullptr);
  dnnl_primitive_t ro; dnnl_primitive_create(&ro, rpd);
  dnnl_stream_t str; dnnl_stream_create(&str, eng, 0);
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, wuser}, {DNNL_ARG_TO, r->w}};
  dnnl_primitive_execute(ro, str, 2, a); dnnl_stream_wait(str);
  dnnl_primitive_create(&r->p, pdsc);
  dnnl_memory_create(&r->s, &sd, eng, src);
  dnnl_memory_create(&r->b, &bd, eng, bias);
  dnnl_memory_create(&r->d, &dd, eng, dst);
  const dnnl_memory_desc_t* smd = dnnl_primitive_desc_query_md(pdsc, dnnl_query_scratchpad_md, 0);
  r->scr = nullptr; if (smd && dnnl_memory_desc_get_size(smd)) dnnl_memory_create(&r->scr, smd, eng, DNNL_MEMORY_ALLOCATE);
  return r;
}
void exec(P* p) {
  dnnl_stream_t str; dnnl_stream_create(&str, eng, 0);
  dnnl_exec_arg_t a[5] = {{DNNL_ARG_SRC, p->s}, {DNNL_ARG_WEIGHTS, p->w}, {DNNL_ARG_BIAS, p->b}, {DNNL_ARG_DST, p->d}, {DNNL_ARG_SCRATCHPAD, p->scr}};
  dnnl_primitive_execute(p->p, str, p->scr ? 5 : 4, a); dnnl_stream_wait(str);
  dnnl_stream_destroy(str);
}
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
template <class F> double best(F f, int reps) {
  double b = 1e9; f();
  for (int r = 0; r < reps; ++r) { double t = now(); f(); b = std::min(b, now() - t); }
  return b;
}
int main() {
  dnnl_engine_create(&eng, dnnl_cpu, 0);
  struct S { const char* net; int C, M, H; } shapes[] = {
    {"r18", 64, 64, 56}, {"r18", 128, 128, 28}, {"r18", 256, 256, 14}, {"r18", 512, 512, 7},
    {"vgg", 64, 128, 112}, {"vgg", 128, 256, 56}, {"vgg", 256, 256, 56}, {"vgg", 256, 512, 28}, {"vgg", 512, 512, 28}, {"vgg", 512, 512, 14}};
  std::mt19937 rng(1); std::uniform_real_distribution<float> U(-1, 1);
  for (int N : {1, 2})
  for (auto& s : shapes) {
    int C = s.C, M = s.M, H = s.H;
    std::vector<float> x((size_t)N * C * H * H), w((size_t)M * C * 9), b(M), y1((size_t)N * M * H * H), y2(y1.size()), y3(y1.size()), y4(y1.size());
    for (auto& v : x) v = U(rng);
    for (auto& v : w) v = U(rng) * 0.05f;
    for (auto& v : b) v = U(rng);
    double fl = 2.0 * N * M * C * 9 * H * H;
    int reps = fl > 2e9 ? 5 : 20;
    omp_set_num_threads(2);
    P* dw = make(N, C, M, H, dnnl_convolution_direct, x.data(), w.data(), b.data(), y1.data());
    P* ww = make(N, C, M, H, dnnl_convolution_winograd, x.data(), w.data(), b.data(), y2.data());
    double td2 = best([&] { exec(dw); }, reps);
    double tw2 = ww ? best([&] { exec(ww); }, reps) : 0;
    // sliced: 2 std::threads, each a half-M primitive (per image), omp 1
    omp_set_num_threads(1);
    auto sliced = [&](dnnl_alg_kind_t alg, float* y) -> double {
      std::vector<P*> ps;
      for (int n = 0; n < N; ++n) for (int h = 0; h < 2; ++h) {
        int m0 = M / 2 * h;
        P* p = make(1, C, M / 2, H, alg, x.data() + (size_t)n * C * H * H, w.data() + (size_t)m0 * C * 9, b.data() + m0, y + ((size_t)n * M + m0) * H * H);
        if (!p) return 0;
        ps.push_back(p);
      }
      return best([&] {
        std::thread t([&] { omp_set_num_threads(1); for (size_t i = 1; i < ps.size(); i += 2) exec(ps[i]); });
        for (size_t i = 0; i < ps.size(); i += 2) exec(ps[i]);
        t.join();
      }, reps);
    };
    double td1 = sliced(dnnl_convolution_direct, y3.data());
    double tw1 = sliced(dnnl_convolution_winograd, y4.data());
    double err = 0, mx = 0, errs = 0;
    for (size_t i = 0; i < y1.size(); ++i) { mx = std::max(mx, (double)std::fabs(y1[i])); if (ww) err = std::max(err, (double)std::fabs(y1[i] - y2[i])); if (tw1) errs = std::max(errs, (double)std::fabs(y1[i] - y4[i])); }
    printf("N=%d %s C=%d M=%d H=%d | direct whole %.0f sliced %.0f | wino whole %.0f sliced %.0f GF/s | %s | maxerr %.2e/%.2e of max|y| %.2f\n",
           N, s.net, C, M, H, fl / td2 / 1e9, fl / td1 / 1e9, tw2 ? fl / tw2 / 1e9 : 0, tw1 ? fl / tw1 / 1e9 : 0, ww ? ww->impl.c_str() : "wino refused", err, errs, mx);
    fflush(stdout);
  }
}
