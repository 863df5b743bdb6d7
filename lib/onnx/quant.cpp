// Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
// ConvInteger, QLinearMatMul, QLinearConv, and ONNX Runtime's com.microsoft MatMulNBits,
// MatMulIntegerToFloat and DynamicQuantizeMatMul.
//
// Integer products stay exact: MatMulInteger is the registry's matmul_integer (i32), and
// ConvInteger is composed from data movement (the input padded with its zero point, one strided
// slice per kernel tap: im2col in i8/u8) and matmul_integer (weights x columns, so that the
// result is NCHW without a transpose), so no product passes through f32.
// The QLinear ops rescale the i32 accumulator in f32 as ONNX Runtime does
// (acc · (x_scale · w_scale / y_scale)), then quantize with scale 1 and the output zero point.
#include "onnx/importer.h"

namespace rlx::onnx {

namespace {

struct Quant : Importer {
  using Importer::Importer;

  // A zero point or scale operand: reshaped to the scale's shape when it has the same elements
  // (exporters write a scalar scale with a [1] zero point and the reverse).
  int like(int v, int ref) {
    if (shp(v) == shp(ref)) return v;
    if (shape_numel(shp(v)) != shape_numel(shp(ref)))
      fail("zero point " + shape_str(shp(v)) + " and scale " + shape_str(shp(ref)) + " differ in size");
    return reshape(v, shp(ref));
  }
  DType quant_dtype(size_t k, const char* what) {
    DType d = to_dtype(in(k).et, where() + ": " + what);
    if (d != DType::i8 && d != DType::u8) unsupported(std::string(what) + " of type " + dtype_name(d) + " (int8 and uint8 are supported)");
    return d;
  }
  void need_float(int x, const char* what) {
    if (!is_float(ts_.dtypes[x])) fail(std::string(what) + " must be a float tensor, got " + dtype_name(ts_.dtypes[x]));
  }

  // ---------- QuantizeLinear / DequantizeLinear ----------
  // axis and block_size as the model's opset defines them (per tensor only before 13).
  std::map<std::string, ir::AttrValue> granularity(int scale) {
    std::map<std::string, ir::AttrValue> a;
    const int64_t opset = m_.opset();
    const int64_t bs = opset >= 21 ? ai("block_size", 0) : 0;
    if (bs < 0) fail("attribute 'block_size' must be >= 0, got " + std::to_string(bs));
    if (opset < 13 && shape_numel(shp(scale)) != 1)
      fail("scale " + shape_str(shp(scale)) + " must be a scalar before opset 13 (per-axis quantization came with opset 13)");
    a["axis"] = opset >= 13 ? ai("axis", 1) : int64_t(1);
    a["block_size"] = bs;
    return a;
  }
  void map_QuantizeLinear() {
    int x = node(0), s = node(1);
    if (!is_float(ts_.dtypes[x])) {
      if (ts_.dtypes[x] != DType::i32) fail(std::string("x must be float or int32, got ") + dtype_name(ts_.dtypes[x]));
      x = cast(x, DType::f32);
    }
    need_float(s, "y_scale");
    if (m_.opset() >= 19 && attr("saturate", kAttrInt) && ai("saturate", 1) != 1)
      unsupported("attribute 'saturate' = 0 (it applies to float8 outputs only)");
    auto a = granularity(s);
    std::vector<int> ins{x, s};
    if (has_in(2)) {
      quant_dtype(2, "y_zero_point");
      ins.push_back(like(node(2), s));
    } else if (m_.opset() >= 21 && ai("output_dtype", 0) != 0) {
      const int64_t od = ai("output_dtype", 0);
      if (od != kInt8 && od != kUint8) unsupported("attribute 'output_dtype' = " + std::to_string(od) + " (int8 and uint8 are supported)");
      a["dtype"] = std::string(od == kInt8 ? "i8" : "u8");
    }
    set_node(0, emit("quantize", ins, a, out_name()));
  }
  void map_DequantizeLinear() {
    int q = node(0), s = node(1);
    const DType qd = ts_.dtypes[q];
    if (qd != DType::i8 && qd != DType::u8 && qd != DType::i32)
      unsupported(std::string("x of type ") + dtype_name(qd) + " (int8, uint8 and int32 are supported)");
    need_float(s, "x_scale");
    auto a = granularity(s);
    std::vector<int> ins{q, s};
    if (has_in(2)) {
      int z = node(2);
      if (ts_.dtypes[z] != qd) fail(std::string("x_zero_point is ") + dtype_name(ts_.dtypes[z]) + ", x is " + dtype_name(qd));
      ins.push_back(like(z, s));
    }
    set_node(0, emit("dequantize", ins, a, out_name()));
  }

  // ---------- DynamicQuantizeLinear ----------
  // uint8, as ONNX defines it: scale = (max(0, max x) − min(0, min x)) / 255,
  // zp = round_half_even(clamp(0 − min(0, min x) / scale, 0, 255)), y = quantize(x, scale, zp).
  // An input whose range is 0 (all zeros) gets scale 1 and zero point 0, as ONNX Runtime
  // (ONNX's formula divides 0 by 0 there).
  struct Dyn {
    int q, scale, zp;
  };
  Dyn dynamic_quantize(int x, const std::string& base) {
    need_float(x, "x");
    if (ts_.dtypes[x] != DType::f32) x = cast(x, DType::f32);
    int mx = emit("maximum", {emit("max", {x}, {{"keepdims", false}}), scalar(0)});
    int mn = emit("minimum", {emit("min", {x}, {{"keepdims", false}}), scalar(0)});
    int range = emit("sub", {mx, mn});
    int scale = emit("where", {emit("equal", {range, scalar(0)}), scalar(1), emit("div", {range, scalar(255)})}, {},
                     base.empty() ? "" : base + "_scale");
    int zpf = emit("round", {clamp(emit("sub", {scalar(0), emit("div", {mn, scale})}), 0, 255)});
    int zp = emit("cast", {zpf}, {{"dtype", std::string("u8")}}, base.empty() ? "" : base + "_zero_point");
    int q = emit("quantize", {x, scale, zp}, {}, base);
    return {q, scale, zp};
  }
  void map_DynamicQuantizeLinear() {
    Dyn d = dynamic_quantize(node(0), out_name(0));
    set_node(0, d.q);
    set_node(1, d.scale);
    set_node(2, d.zp);
  }

  // ---------- MatMulInteger ----------
  // matmul_integer with 1-D operands reshaped as MatMul does; zero points as ONNX gives them.
  int matmul_integer(int a, int b, int azp, int bzp, const std::string& id) {
    for (int v : {a, b})
      if (ts_.dtypes[v] != DType::i8 && ts_.dtypes[v] != DType::u8)
        unsupported(std::string("an operand of type ") + dtype_name(ts_.dtypes[v]) + " (int8 and uint8 are supported)");
    Shape sa = shp(a), sb = shp(b);
    if (sa.empty() || sb.empty()) fail("operands must have rank >= 1");
    const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
    if (a1) a = reshape(a, {1, sa[0]});
    if (b1) b = reshape(b, {sb[0], 1});
    std::vector<int> ins{a, b};
    if (azp >= 0 || bzp >= 0) {
      if (azp < 0) azp = constant({}, {0}, ts_.dtypes[a]);
      ins.push_back(azp);
    }
    if (bzp >= 0) {
      // a per-column zero point of b as [N] (ONNX writes [N] or [1, N])
      if (shp(bzp).size() == 2 && shp(bzp)[0] == 1) bzp = reshape(bzp, {shp(bzp)[1]});
      ins.push_back(bzp);
    }
    // per-row zero point of a written [M, 1] or [M] both accepted by the registry
    int y = emit("matmul_integer", ins, {}, (a1 || b1) ? "" : id);
    if (a1 || b1) {
      Shape o = shp(y);
      if (b1) o.pop_back();
      if (a1) o.erase(o.end() - (b1 ? 1 : 2));
      y = emit("reshape", {y}, {{"shape", std::vector<int64_t>(o.begin(), o.end())}}, id);
    }
    return y;
  }
  int zp_in(size_t k, int operand, const char* what) {
    if (!has_in(k)) return -1;
    int z = node(k);
    if (ts_.dtypes[z] != ts_.dtypes[operand])
      fail(std::string(what) + " is " + dtype_name(ts_.dtypes[z]) + ", its operand " + dtype_name(ts_.dtypes[operand]));
    if (shape_numel(shp(z)) == 1 && !shp(z).empty()) z = reshape(z, {});
    return z;
  }
  void map_MatMulInteger() {
    int a = node(0), b = node(1);
    set_node(0, matmul_integer(a, b, zp_in(2, a, "a_zero_point"), zp_in(3, b, "b_zero_point"), out_name()));
  }

  // ---------- ConvInteger ----------
  // x [N, C, H, W] and w [M, C/group, KH, KW] (i8/u8; 1-D as 2-D), exact i32 [N, M, OH, OW]:
  // x padded with its zero point (so padding contributes 0 after the zero point is subtracted,
  // as ONNX and ONNX Runtime define it), one strided slice per kernel tap stacked into
  // [N, C/group · KH · KW, OH · OW] (im2col, moved as i8/u8), and per group and image one
  // matmul_integer of w with it.
  int conv_integer(int x, int w, int xzp, int wzp, const std::string& id) {
    for (int v : {x, w})
      if (ts_.dtypes[v] != DType::i8 && ts_.dtypes[v] != DType::u8)
        unsupported(std::string("an operand of type ") + dtype_name(ts_.dtypes[v]) + " (int8 and uint8 are supported)");
    Shape s = shp(x), ws = shp(w);
    const size_t sd = s.size() >= 2 ? s.size() - 2 : 0;
    if (sd != 1 && sd != 2) unsupported(cur_->op_type + " on " + std::to_string(sd) + "-D data (1-D and 2-D are supported)");
    if (ws.size() != s.size()) fail("W " + shape_str(ws) + " must have X's rank " + std::to_string(s.size()));
    Shape ksz(ws.begin() + 2, ws.end());
    if (auto k = aints("kernel_shape"))
      if (Shape(k->begin(), k->end()) != ksz) fail("kernel_shape differs from W's spatial dims " + shape_str(ksz));
    auto get = [&](const char* nm, int64_t def, size_t cnt) {
      auto v = aints(nm).value_or(std::vector<int64_t>(cnt, def));
      if (v.size() != cnt) fail(std::string("attribute '") + nm + "' has " + std::to_string(v.size()) + " entries, expected " + std::to_string(cnt));
      for (auto e : v)
        if (e < (def == 0 ? 0 : 1)) fail(std::string("attribute '") + nm + "' has an invalid entry " + std::to_string(e));
      return v;
    };
    auto strides = get("strides", 1, sd), dil = get("dilations", 1, sd), pads = get("pads", 0, 2 * sd);
    const std::string ap = as("auto_pad", "NOTSET");
    if (ap == "VALID") {
      std::fill(pads.begin(), pads.end(), 0);
    } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
      for (size_t k = 0; k < sd; ++k) {
        int64_t in_d = s[2 + k], out_d = (in_d + strides[k] - 1) / strides[k];
        int64_t total = std::max<int64_t>(0, (out_d - 1) * strides[k] + (ksz[k] - 1) * dil[k] + 1 - in_d);
        pads[k] = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
        pads[k + sd] = total - pads[k];
      }
    } else if (ap != "NOTSET") {
      unsupported(cur_->op_type + " attribute 'auto_pad' = \"" + ap + "\"");
    }
    const int64_t group = ai("group", 1);
    if (sd == 1) {
      x = reshape(x, {s[0], s[1], 1, s[2]});
      w = reshape(w, {ws[0], ws[1], 1, ws[2]});
      ksz.insert(ksz.begin(), 1);
      strides.insert(strides.begin(), 1);
      dil.insert(dil.begin(), 1);
      pads = {0, pads[0], 0, pads[1]};
      s = shp(x);
      ws = shp(w);
    }
    const int64_t N = s[0], C = s[1], H = s[2], W = s[3], M = ws[0];
    if (group < 1 || C % group || M % group) fail("group " + std::to_string(group) + " does not divide C = " + std::to_string(C) + " and M = " + std::to_string(M));
    const int64_t Cg = C / group, Mg = M / group, KH = ksz[0], KW = ksz[1];
    if (ws[1] != Cg) fail("W " + shape_str(ws) + " needs C/group = " + std::to_string(Cg) + " input channels");
    const int64_t Hp = H + pads[0] + pads[2], Wp = W + pads[1] + pads[3];
    const int64_t OH = Hp < (KH - 1) * dil[0] + 1 ? 0 : (Hp - (KH - 1) * dil[0] - 1) / strides[0] + 1;
    const int64_t OW = Wp < (KW - 1) * dil[1] + 1 ? 0 : (Wp - (KW - 1) * dil[1] - 1) / strides[1] + 1;
    if (OH <= 0 || OW <= 0) fail("the kernel " + shape_str(ksz) + " does not fit the padded input " + shape_str(Shape{Hp, Wp}));
    // pad with the zero point: concatenations of the zero point broadcast to the borders
    int xp = x;
    if (std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p != 0; })) {
      auto zp_host = xzp >= 0 ? host_of_node(xzp) : std::optional<int64_t>(0);
      if (zp_host) {
        xp = emit("pad", {x}, {{"pads", std::vector<int64_t>{0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]}},
                               {"value", (double)*zp_host}});
      } else {
        int z4 = reshape(xzp, {1, 1, 1, 1});
        auto border = [&](int64_t h, int64_t wd) {
          return emit("broadcast_to", {z4}, {{"shape", std::vector<int64_t>{N, C, h, wd}}});
        };
        std::vector<int> rows;
        if (pads[0]) rows.push_back(border(pads[0], W));
        rows.push_back(x);
        if (pads[2]) rows.push_back(border(pads[2], W));
        xp = rows.size() > 1 ? emit("concat", rows, {{"axis", int64_t(2)}}) : x;
        std::vector<int> cols;
        if (pads[1]) cols.push_back(border(Hp, pads[1]));
        cols.push_back(xp);
        if (pads[3]) cols.push_back(border(Hp, pads[3]));
        if (cols.size() > 1) xp = emit("concat", cols, {{"axis", int64_t(3)}});
      }
    }
    // Per group and image: w [Mg, Cg·KH·KW] (its zero point per row of a) times cols
    // [Cg·KH·KW, OH·OW] (x's zero point, a scalar, is b's): the result comes out as
    // [Mg, OH·OW], already in NCHW order, and cols is the taps stacked as sliced, so neither
    // the input nor the output is transposed (the long spatial axis is N, which qgemm splits
    // over its threads; B, the columns, is packed once per call).
    std::vector<int> ys;
    for (int64_t g = 0; g < group; ++g) {
      int xg = group == 1 ? xp : narrow(xp, 1, g * Cg, Cg);
      int cols;  // [N, Cg·KH·KW, OH·OW]
      if (KH == 1 && KW == 1 && strides[0] == 1 && strides[1] == 1) {
        cols = reshape(xg, {N, Cg, OH * OW});
      } else {
        std::vector<int> taps;
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t h0 = kh * dil[0], w0 = kw * dil[1];
            int t = emit("slice", {xg}, {{"starts", std::vector<int64_t>{h0, w0}},
                                         {"ends", std::vector<int64_t>{h0 + (OH - 1) * strides[0] + 1, w0 + (OW - 1) * strides[1] + 1}},
                                         {"axes", std::vector<int64_t>{2, 3}},
                                         {"steps", std::vector<int64_t>{strides[0], strides[1]}}});
            taps.push_back(reshape(t, {N, Cg, 1, OH * OW}));
          }
        int st = taps.size() == 1 ? taps[0] : concat_many(taps, 2);  // [N, Cg, KH·KW, OH·OW]
        cols = reshape(st, {N, Cg * KH * KW, OH * OW});
      }
      int wg = reshape(group == 1 ? w : narrow(w, 0, g * Mg, Mg), {Mg, Cg * KH * KW});
      int azg = wzp;
      if (azg >= 0 && !shp(azg).empty() && group > 1) azg = narrow(azg, 0, g * Mg, Mg);
      std::vector<int> per_image;
      for (int64_t n = 0; n < N; ++n) {
        int cn = reshape(N == 1 ? cols : narrow(cols, 0, n, 1), {Cg * KH * KW, OH * OW});
        std::vector<int> ins{wg, cn};
        if (xzp >= 0 || azg >= 0) ins.push_back(azg >= 0 ? azg : constant({}, {0}, ts_.dtypes[w]));
        if (xzp >= 0) ins.push_back(xzp);
        per_image.push_back(reshape(emit("matmul_integer", ins), {1, Mg, OH * OW}));
      }
      ys.push_back(per_image.size() == 1 ? per_image[0] : concat_many(per_image, 0));  // [N, Mg, OH·OW]
    }
    int y = ys.size() == 1 ? ys[0] : concat_many(ys, 1);
    if (sd == 1) return emit("reshape", {y}, {{"shape", std::vector<int64_t>{N, M, OW}}}, id);
    return emit("reshape", {y}, {{"shape", std::vector<int64_t>{N, M, OH, OW}}}, id);
  }
  // The value of a one-element integer node known at import (a constant or parameter), if any.
  std::optional<int64_t> host_of_node(int n) {
    const auto& nd = g_->nodes[n];
    if (nd.op == ir::Op::Constant && nd.constant.numel() == 1) return nd.constant.int_at(0);
    if (nd.op == ir::Op::Param) {
      auto it = params_.find(nd.id);
      if (it != params_.end() && it->second.numel() == 1) return it->second.int_at(0);
    }
    return std::nullopt;
  }
  // ConvInteger's x zero point is a scalar; w's is a scalar or one per output channel.
  int conv_zps(size_t k, int operand, const char* what, bool per_channel_ok) {
    if (!has_in(k)) return -1;
    int z = zp_in(k, operand, what);
    if (shape_numel(shp(z)) == 1) {
      if (auto h = host(k)) return constant({}, {(double)h->n(0)}, ts_.dtypes[operand]);  // known: padding uses it
      return reshape(z, {});
    }
    if (!per_channel_ok || shp(z).size() != 1 || shp(z)[0] != shp(operand)[0])
      unsupported(std::string(what) + " of shape " + shape_str(shp(z)) + (per_channel_ok ? " (a scalar or one per output channel)" : " (a scalar)"));
    return z;
  }
  void map_ConvInteger() {
    int x = node(0), w = node(1);
    int xz = conv_zps(2, x, "x_zero_point", false), wz = conv_zps(3, w, "w_zero_point", true);
    set_node(0, conv_integer(x, w, xz, wz, out_name()));
  }

  // ---------- QLinearMatMul / QLinearConv ----------
  // y = quantize(f32(acc) · (x_scale · w_scale / y_scale), 1, y_zp): ONNX Runtime's one f32
  // multiplier per output (per channel with per-channel weight scales), then round half to even.
  int requantize(int acc, int mult, int yzp, const std::string& id) {
    int f = emit("mul", {cast(acc, DType::f32), mult});
    return emit("quantize", {f, scalar(1), yzp}, {}, id);
  }
  int scale_in(size_t k, const char* what) {
    int s = node(k);
    need_float(s, what);
    if (ts_.dtypes[s] != DType::f32) s = cast(s, DType::f32);
    if (shape_numel(shp(s)) == 1) s = reshape(s, {});
    return s;
  }
  int yzp_in(size_t k, DType want) {
    if (!has_in(k)) return constant({}, {0}, want);
    int z = node(k);
    if (ts_.dtypes[z] != DType::i8 && ts_.dtypes[z] != DType::u8) unsupported(std::string("y_zero_point of type ") + dtype_name(ts_.dtypes[z]));
    if (shape_numel(shp(z)) != 1) unsupported("y_zero_point of shape " + shape_str(shp(z)) + " (a scalar)");
    return reshape(z, {});
  }
  void map_QLinearMatMul() {
    int a = node(0), b = node(3);
    int as_ = scale_in(1, "a_scale"), bs = scale_in(4, "b_scale"), ys = scale_in(6, "y_scale");
    int az = zp_in(2, a, "a_zero_point"), bz = zp_in(5, b, "b_zero_point");
    if (az >= 0 && shape_numel(shp(az)) == 1) az = reshape(az, {});
    if (bz >= 0 && shape_numel(shp(bz)) == 1) bz = reshape(bz, {});
    if (!shp(bs).empty()) {  // per column of b: [N] or [1, N]
      const int64_t n = shp(bs).back();
      bs = reshape(bs, {n});
    }
    int acc = matmul_integer(a, b, az, bz, "");
    int mult = emit("div", {emit("mul", {as_, bs}), ys});
    set_node(0, requantize(acc, mult, yzp_in(7, ts_.dtypes[a]), out_name()));
  }
  void map_QLinearConv() {
    int x = node(0), w = node(3);
    int xs = scale_in(1, "x_scale"), ws = scale_in(4, "w_scale"), ys = scale_in(6, "y_scale");
    int xz = conv_zps(2, x, "x_zero_point", false), wz = conv_zps(5, w, "w_zero_point", true);
    int acc = conv_integer(x, w, xz, wz, "");
    const int64_t M = shp(w)[0];
    const Shape ch = shp(acc).size() == 4 ? Shape{1, M, 1, 1} : Shape{1, M, 1};
    if (has_in(8)) {
      int b = node(8);
      if (ts_.dtypes[b] != DType::i32) fail(std::string("B must be int32, got ") + dtype_name(ts_.dtypes[b]));
      if (shp(b) != Shape{M}) fail("B must be [" + std::to_string(M) + "], got " + shape_str(shp(b)));
      acc = emit("add", {cast(acc, DType::f32), reshape(cast(b, DType::f32), ch)});
    }
    if (!shp(ws).empty()) {
      if (shape_numel(shp(ws)) != M) fail("w_scale must be a scalar or [" + std::to_string(M) + "], got " + shape_str(shp(ws)));
      ws = reshape(ws, ch);
    }
    int mult = emit("div", {emit("mul", {xs, ws}), ys});
    set_node(0, requantize(acc, mult, yzp_in(7, ts_.dtypes[x]), out_name()));
  }

  // ---------- com.microsoft ----------
  // MatMulNBits: ONNX Runtime's 4-bit (and 8-bit) block-quantized weights; bias added after.
  void map_MatMulNBits() {
    if (has_in(4)) unsupported("MatMulNBits input 'g_idx' (act-order group indices)");
    int a = node(0);
    need_float(a, "A");
    const int64_t K = ai("K", 0), N = ai("N", 0), bits = ai("bits", 4), bs = ai("block_size", 0);
    if (bits != 4) unsupported("MatMulNBits attribute 'bits' = " + std::to_string(bits) + " (4 is supported)");
    if (K <= 0 || N <= 0 || bs <= 0) fail("attributes K, N and block_size are required and must be positive");
    std::vector<int> ins{a, node(1), node(2)};
    if (has_in(3)) {
      int z = node(3);
      if (ts_.dtypes[z] != DType::u8)
        unsupported(std::string("MatMulNBits zero_points of type ") + dtype_name(ts_.dtypes[z]) + " (packed uint8 is supported)");
      ins.push_back(z);
    }
    const bool bias = has_in(5);
    // accuracy_level 4 (int8 activations) kept; 0-3 all mean f32 activations to rlx
    std::map<std::string, ir::AttrValue> at{{"k", K}, {"n", N}, {"bits", bits}, {"block_size", bs}};
    if (ai("accuracy_level", 0) == 4) at["accuracy_level"] = int64_t(4);
    int y = emit("matmul_nbits", ins, at, bias ? "" : out_name());
    if (bias) y = emit("add", {y, node(5)}, {}, out_name());
    set_node(0, y);
  }
  // MatMulIntegerToFloat: f32(matmul_integer(A, B, a_zp, b_zp)) · (a_scale · b_scale) [+ bias].
  int int_to_float(int acc, int as_, int bs, int bias_k) {
    if (!shp(bs).empty()) bs = reshape(bs, {shp(bs).back()});
    const bool bias = has_in(bias_k);
    int y = emit("mul", {cast(acc, DType::f32), emit("mul", {as_, bs})}, {}, bias ? "" : out_name());
    if (bias) y = emit("add", {y, node(bias_k)}, {}, out_name());
    return y;
  }
  void map_MatMulIntegerToFloat() {
    int a = node(0), b = node(1);
    int as_ = scale_in(2, "a_scale"), bs = scale_in(3, "b_scale");
    int az = zp_in(4, a, "a_zero_point"), bz = zp_in(5, b, "b_zero_point");
    if (az >= 0 && !shp(az).empty()) unsupported("a_zero_point of shape " + shape_str(shp(az)) + " (a scalar)");
    set_node(0, int_to_float(matmul_integer(a, b, az, bz, ""), as_, bs, 6));
  }
  // DynamicQuantizeMatMul: A quantized as DynamicQuantizeLinear (uint8), then as above.
  void map_DynamicQuantizeMatMul() {
    int b = node(1);
    int bs = scale_in(2, "b_scale");
    int bz = zp_in(3, b, "b_zero_point");
    Dyn d = dynamic_quantize(node(0), "");
    set_node(0, int_to_float(matmul_integer(d.q, b, d.zp, bz, ""), d.scale, bs, 4));
  }
};

}  // namespace

void quant_ops(std::vector<OpDef>& t) {
  using F = Quant;
  t.insert(t.end(), {
      {"QuantizeLinear", "", 10, map<&F::map_QuantizeLinear>, nullptr, "quantize", "quantize",
       "per tensor, per axis (13), blocked (21); int8/uint8 outputs; round half to even, saturated"},
      {"QuantizeLinear", "", 13, map<&F::map_QuantizeLinear>, nullptr, nullptr, nullptr, nullptr},
      {"QuantizeLinear", "", 19, map<&F::map_QuantizeLinear>, nullptr, nullptr, nullptr, nullptr},
      {"QuantizeLinear", "", 21, map<&F::map_QuantizeLinear>, nullptr, nullptr, nullptr, nullptr},
      {"DequantizeLinear", "", 10, map<&F::map_DequantizeLinear>, nullptr, "dequantize", "dequantize",
       "per tensor, per axis (13), blocked (21); int8, uint8 and int32 inputs"},
      {"DequantizeLinear", "", 13, map<&F::map_DequantizeLinear>, nullptr, nullptr, nullptr, nullptr},
      {"DequantizeLinear", "", 19, map<&F::map_DequantizeLinear>, nullptr, nullptr, nullptr, nullptr},
      {"DequantizeLinear", "", 21, map<&F::map_DequantizeLinear>, nullptr, nullptr, nullptr, nullptr},
      {"DynamicQuantizeLinear", "", 11, map<&F::map_DynamicQuantizeLinear>, nullptr,
       "max, min, maximum, minimum, sub, div, equal, where, round, cast, quantize", "quantize",
       "uint8; an all-zero input gets scale 1 and zero point 0, as ONNX Runtime"},
      {"MatMulInteger", "", 10, map<&F::map_MatMulInteger>, nullptr, "matmul_integer (1-D operands reshaped)", "matmul_integer",
       "exact int32; zero points scalar, per row of A or per column of B"},
      {"ConvInteger", "", 10, map<&F::map_ConvInteger>, nullptr, "pad/concat, slice, reshape (im2col in int8/uint8), matmul_integer (weights × columns)",
       "matmul_integer", "exact int32; 1-D and 2-D; groups, dilations, pads, strides, auto_pad; x zero point scalar, w zero point scalar or per output channel"},
      {"QLinearMatMul", "", 10, map<&F::map_QLinearMatMul>, nullptr, "matmul_integer, cast, mul, div, quantize", "matmul_integer quantize",
       "the i32 accumulator times one f32 multiplier a_scale · b_scale / y_scale (per column with per-column b_scale), rounded half to even"},
      {"QLinearMatMul", "", 21, map<&F::map_QLinearMatMul>, nullptr, nullptr, nullptr, nullptr},
      {"QLinearConv", "", 10, map<&F::map_QLinearConv>, nullptr, "ConvInteger's composition, cast, add, mul, div, quantize", "matmul_integer quantize",
       "as ConvInteger; int32 bias; per-channel w_scale/w_zero_point; the accumulator rescaled as QLinearMatMul"},
      {"MatMulNBits", "com.microsoft", 1, map<&F::map_MatMulNBits>, nullptr, "matmul_nbits [+ add]", "matmul_nbits",
       "ONNX Runtime's contrib op: bits 4, any block_size >= 16 (power of 2), packed uint8 zero points, optional bias; "
       "accuracy_level 4 kept (int8 activations and integer products on the CPU, as ORT; docs/graph-format.md), levels 0-3 "
       "computed with f32 activations; g_idx and float zero points are refused"},
      {"MatMulIntegerToFloat", "com.microsoft", 1, map<&F::map_MatMulIntegerToFloat>, nullptr, "matmul_integer, cast, mul [+ add]", "matmul_integer",
       "ONNX Runtime's contrib op; scalar a_zero_point"},
      {"DynamicQuantizeMatMul", "com.microsoft", 1, map<&F::map_DynamicQuantizeMatMul>, nullptr,
       "DynamicQuantizeLinear's composition, matmul_integer, cast, mul [+ add]", "matmul_integer quantize", "ONNX Runtime's contrib op"},
  });
}

}  // namespace rlx::onnx
