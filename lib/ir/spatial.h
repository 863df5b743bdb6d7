#pragma once
// Geometry of the convolution family (conv2d, conv_transpose2d, max_pool2d,
// avg_pool2d, their 3-D forms conv3d, conv_transpose3d, max_pool3d, avg_pool3d, and
// resize): computed once from a node's attributes and input shapes,
// shared by shape inference (op_registry.cpp), the CPU kernels
// (backends/cpu/cpu_ops_conv.cpp) and the Vulkan lowering (vulkan/kernels_conv.cpp).
// All tensors are NCHW (2-D) or NCDHW (3-D); the rules follow ONNX (see docs/graph-format.md).
// One description serves both: a 2-D op is a 3-D one with D = OD = kD = 1 and no depth padding.
#include <string>
#include <vector>

#include "ir/graph.h"

namespace rlx::ir {

bool is_spatial(Op op);
// Spatial axes of a convolution-family op: 3 for the *3d ops, else 2.
int spatial_rank(Op op);

struct Conv2dGeom {
  int nd = 2;                                 // spatial axes (2 or 3)
  int64_t N = 0, C = 0, D = 1, H = 0, W = 0;  // input x
  int64_t M = 0, OD = 1, OH = 0, OW = 0;      // output [N, M, (OD,) OH, OW]
  int64_t kD = 1, kH = 1, kW = 1;             // kernel (window for the pools)
  int64_t sD = 1, sH = 1, sW = 1, dD = 1, dH = 1, dW = 1;
  int64_t pf = 0, pk = 0;                  // depth pads: front, back
  int64_t pt = 0, pl = 0, pb = 0, pr = 0;  // pads: top, left, bottom, right
  int64_t groups = 1;
  int64_t Cg = 0, Mg = 0;  // input / output channels per group
  bool has_bias = false;
  bool ceil_mode = false, count_include_pad = false;
  // extents of the dilated kernel
  int64_t ext_d() const { return (kD - 1) * dD + 1; }
  int64_t ext_h() const { return (kH - 1) * dH + 1; }
  int64_t ext_w() const { return (kW - 1) * dW + 1; }
};

// For conv2d, conv_transpose2d, max_pool2d, avg_pool2d and their 3-D forms. `ins` are the input
// shapes in order. Throws InputError("<where>: <what>") on a bad attribute or shape.
Conv2dGeom conv2d_geom(const Node& n, const std::vector<Shape>& ins, const std::string& where);

// Divisor of avg_pool2d at output position (oh, ow) (ONNX / ORT rule: with
// count_include_pad the window is clipped to the padded input, else to the input).
int64_t avg_pool_divisor(const Conv2dGeom& g, int64_t oh, int64_t ow);
// The same at (od, oh, ow) of a 3-D pool.
int64_t avg_pool_divisor(const Conv2dGeom& g, int64_t od, int64_t oh, int64_t ow);

// resize: for every axis and every output coordinate o, the source taps:
// value = (1 - w) * x[i0] + w * x[i1] along that axis (nearest: i1 == i0, w == 0).
// Coordinates are computed in double precision.
struct ResizeAxis {
  std::vector<int64_t> i0, i1;
  std::vector<float> w;
};
struct ResizePlan {
  bool linear = false;
  std::vector<ResizeAxis> axes;  // one per axis of x
};
ResizePlan resize_plan(const Node& n, const Shape& in, const Shape& out);

// Output shape of a spatial node, checking everything (used by infer_node).
Shape infer_spatial(const Node& n, const std::vector<Shape>& ins, const std::string& where);

// FLOPs (2 per multiply-add) of a spatial node.
double spatial_flops(const Node& n, const std::vector<Shape>& ins, const Shape& out);

}  // namespace rlx::ir
