"""Golden cases of the convolution family (conv2d, conv_transpose2d, max_pool2d, avg_pool2d,
their 3-D forms, resize) for scripts/gen_goldens.py, plus self-checks of their NumPy reference
(scripts/graphlib_conv.py) against independent formulations, and malformed graphs."""
import math

import numpy as np

import graphlib as gl
import graphlib_conv as gc


def build(G):
    """Adds the cases through gen_goldens' helpers (G is the gen_goldens module)."""
    f32, single, rng_for = G.f32, G.single, G.rng_for

    def conv(name, x, w, b=None, family="accumulate", desc="", op="conv2d", **attrs):
        ins = [("x", x, "input"), ("w", w, "param")]
        if b is not None:
            ins.append(("b", b, "param"))
        single(name, op, ins, attrs or None, family=family, desc=desc)

    # ---- conv2d ----
    r = rng_for("conv2d")
    n = r.standard_normal
    conv("op_conv2d_1x1", f32(n((2, 8, 5, 6))), f32(n((4, 8, 1, 1)) / 3), f32(n(4) * 0.1),
         desc="1x1 conv (pointwise, reads x directly), bias")
    conv("op_conv2d_1x1_stride2", f32(n((1, 6, 7, 8))), f32(n((5, 6, 1, 1)) / 3), strides=[2, 2],
         desc="1x1 conv stride 2 (a ResNet downsample shortcut), no bias")
    conv("op_conv2d_3x3_s2_p1", f32(n((1, 3, 9, 11))), f32(n((5, 3, 3, 3)) / 5), f32(n(5) * 0.1),
         strides=[2, 2], pads=[1, 1, 1, 1], desc="3x3 stride 2 pad 1, odd sizes, bias")
    conv("op_conv2d_dilation2", f32(n((1, 4, 10, 9))), f32(n((6, 4, 3, 3)) / 6), pads=[2, 2, 2, 2],
         dilations=[2, 2], desc="3x3 dilation 2 pad 2 (same size), no bias")
    conv("op_conv2d_groups2", f32(n((2, 6, 7, 7))), f32(n((4, 3, 3, 3)) / 5), f32(n(4) * 0.1), groups=2,
         pads=[1, 1, 1, 1], desc="groups 2 (3 input channels per group), pad 1, batch 2, bias")
    conv("op_conv2d_depthwise", f32(n((1, 6, 8, 8))), f32(n((6, 1, 3, 3)) / 3), f32(n(6) * 0.1), groups=6,
         strides=[2, 1], pads=[1, 1, 1, 1], desc="depthwise 3x3 (groups = channels), strides [2,1], bias")
    conv("op_conv2d_depthwise_multiplier", f32(n((2, 3, 6, 7))), f32(n((6, 1, 3, 2)) / 3), groups=3,
         dilations=[1, 2], pads=[1, 0, 1, 2], desc="depthwise with multiplier 2 (M = 2C), 3x2 kernel, dilation [1,2], asymmetric pads")
    conv("op_conv2d_asym_pads", f32(n((1, 3, 6, 7))), f32(n((4, 3, 2, 3)) / 4), f32(n(4) * 0.1),
         pads=[0, 1, 2, 0], strides=[1, 2], desc="2x3 kernel, asymmetric pads [top 0, left 1, bottom 2, right 0], strides [1,2]")
    conv("op_conv2d_tiles", f32(n((1, 8, 30, 33))), f32(n((16, 8, 3, 3)) / 8), f32(n(16) * 0.1), pads=[1, 1, 1, 1],
         desc="3x3 pad 1 over 30x33 positions (several im2col tiles, rows split across tiles)")
    conv("op_conv2d_kernel_equals_input", f32(n((1, 2, 3, 4))), f32(n((3, 2, 3, 4)) / 4), f32(n(3) * 0.1),
         desc="kernel as large as the input: a 1x1 output")

    conv("op_conv2d_f16_inputs", n((1, 4, 6, 5)).astype(np.float16), (n((6, 4, 3, 3)) / 6).astype(np.float16),
         (n(6) * 0.1).astype(np.float16), pads=[1, 1, 1, 1], family="half_op_f16",
         desc="f16 x, weight and bias (accumulated in f32, rounded to the f16 result)")

    # ---- conv_transpose2d ----
    r = rng_for("conv_transpose2d")
    n = r.standard_normal
    conv("op_conv_transpose2d_s2_outpad", f32(n((1, 4, 5, 6))), f32(n((4, 3, 3, 3)) / 4), f32(n(3) * 0.1),
         op="conv_transpose2d", strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1],
         desc="3x3 stride 2 pad 1 output_padding 1 (exact 2x upsampling), bias")
    conv("op_conv_transpose2d_k2s2", f32(n((2, 3, 4, 4))), f32(n((3, 2, 2, 2)) / 2), op="conv_transpose2d",
         strides=[2, 2], desc="2x2 stride 2 (U-Net upsampling), batch 2")
    conv("op_conv_transpose2d_groups_dilation", f32(n((2, 4, 4, 5))), f32(n((4, 2, 3, 2)) / 3), f32(n(4) * 0.1),
         op="conv_transpose2d", groups=2, dilations=[2, 1], pads=[0, 1, 1, 0], strides=[1, 2], output_padding=[1, 1],
         desc="groups 2, dilation [2,1], asymmetric pads, strides [1,2], output_padding [1,1] (< dilation on H)")

    # ---- pools ----
    r = rng_for("pool2d")
    n = r.standard_normal
    x = f32(n((2, 3, 9, 9)))
    single("op_max_pool2d_3x3_s2_p1", "max_pool2d", [("x", x, "input")],
           {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, desc="3x3 stride 2 pad 1 (ResNet stem)")
    single("op_max_pool2d_ceil", "max_pool2d", [("x", f32(n((1, 2, 8, 7))), "input")],
           {"kernel": [3, 2], "strides": [2, 2], "ceil_mode": True},
           desc="3x2 stride 2 ceil_mode: the last windows hang over the input")
    single("op_max_pool2d_ceil_drop", "max_pool2d", [("x", f32(n((1, 2, 5, 6))), "input")],
           {"kernel": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": True},
           desc="ceil_mode where a last window would start in the bottom padding: dropped (5 -> 3 rows)")
    single("op_max_pool2d_dilation", "max_pool2d", [("x", f32(n((1, 3, 7, 8))), "input")],
           {"kernel": [2, 3], "dilations": [2, 2], "pads": [1, 0, 1, 2]},
           desc="2x3 window dilation 2, asymmetric pads (padding never wins)")
    neg = f32(-np.abs(n((1, 2, 4, 4))) - 1)
    single("op_max_pool2d_negative_padded", "max_pool2d", [("x", neg, "input")],
           {"kernel": [3, 3], "pads": [1, 1, 1, 1]}, desc="all-negative input, pad 1: zeros of the padding must never win")
    single("op_avg_pool2d_2x2", "avg_pool2d", [("x", x, "input")], {"kernel": [2, 2], "strides": [2, 2]},
           family="reduction", desc="2x2 stride 2, odd input (last row/column dropped)")
    single("op_avg_pool2d_pad_exclude", "avg_pool2d", [("x", f32(n((1, 3, 6, 5))), "input")],
           {"kernel": [3, 3], "pads": [1, 1, 1, 1]}, family="reduction",
           desc="3x3 pad 1, count_include_pad false: edges divide by the real elements")
    single("op_avg_pool2d_pad_include_ceil", "avg_pool2d", [("x", f32(n((1, 2, 8, 8))), "input")],
           {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": True, "count_include_pad": True},
           family="reduction", desc="count_include_pad with ceil_mode: the divisor counts pads, not the overhang past them")
    single("op_avg_pool2d_ceil_exclude_asym", "avg_pool2d", [("x", f32(n((2, 2, 7, 6))), "input")],
           {"kernel": [2, 3], "strides": [2, 2], "pads": [0, 1, 1, 0], "ceil_mode": True}, family="reduction",
           desc="ceil_mode, asymmetric pads, count_include_pad false")

    build_3d(G, conv)

    # ---- resize ----
    r = rng_for("resize")
    n = r.standard_normal
    def rs(name, x, sizes, desc="", **attrs):
        a = {"sizes": list(sizes)}
        a.update(attrs)
        # nearest copies elements; linear is a weighted sum of 4 taps (a small f32 reduction)
        family = "reduction" if a.get("mode") == "linear" else "elementwise"
        single(name, "resize", [("x", x, "input")], a, family=family, desc=desc)
    rs("op_resize_nearest_default", f32(n((1, 2, 3, 4))), [1, 2, 7, 9],
       desc="nearest, defaults: half_pixel, round_prefer_floor; up by 7/3 and 9/4")
    rs("op_resize_nearest_asymmetric_floor", f32(n((1, 2, 4, 5))), [1, 2, 8, 10], scales=[1.0, 1.0, 2.0, 2.0],
       coordinate_transformation_mode="asymmetric", nearest_mode="floor",
       desc="nearest asymmetric floor, scales 2 (PyTorch's nearest upsampling)")
    rs("op_resize_nearest_asymmetric_prefer_floor_ties", f32(n((1, 1, 3, 4))), [1, 1, 6, 8],
       coordinate_transformation_mode="asymmetric", desc="asymmetric x2: every odd output is a .5 tie, round_prefer_floor")
    rs("op_resize_nearest_asymmetric_prefer_ceil_ties", f32(n((1, 1, 3, 4))), [1, 1, 6, 8],
       coordinate_transformation_mode="asymmetric", nearest_mode="round_prefer_ceil",
       desc="asymmetric x2 ties, round_prefer_ceil (clamped at the end)")
    rs("op_resize_nearest_align_corners_down", f32(n((1, 1, 9, 8))), [1, 1, 4, 3],
       coordinate_transformation_mode="align_corners", nearest_mode="round_prefer_ceil",
       desc="nearest align_corners downsampling 9x8 -> 4x3, round_prefer_ceil")
    rs("op_resize_nearest_ceil_tf_half_pixel", f32(n((1, 2, 4, 6))), [1, 2, 6, 9],
       coordinate_transformation_mode="tf_half_pixel_for_nn", nearest_mode="ceil",
       desc="nearest tf_half_pixel_for_nn ceil, up by 3/2")
    rs("op_resize_nearest_pytorch_half_pixel_down", f32(n((2, 1, 7, 5))), [2, 1, 3, 1],
       coordinate_transformation_mode="pytorch_half_pixel", desc="nearest pytorch_half_pixel down to 3x1 (a length-1 axis maps to 0)")
    rs("op_resize_nearest_scales_given", f32(n((1, 2, 4, 4))), [1, 2, 6, 6], scales=[1.0, 1.0, 1.7, 1.7],
       desc="scales 1.7 drive the coordinates; sizes floor(4 * 1.7) = 6")
    rs("op_resize_nearest_rank3_all_axes", f32(n((2, 3, 4))), [3, 5, 2], nearest_mode="floor",
       desc="nearest on a rank-3 tensor, every axis resized (up, up, down)")
    rs("op_resize_linear_up_half_pixel", f32(n((1, 2, 4, 5))), [1, 2, 8, 10], mode="linear",
       scales=[1.0, 1.0, 2.0, 2.0], desc="bilinear x2, half_pixel (edges clamp)")
    rs("op_resize_linear_down_half_pixel", f32(n((1, 2, 9, 7))), [1, 2, 4, 3], mode="linear",
       desc="bilinear down 9x7 -> 4x3, half_pixel")
    rs("op_resize_linear_align_corners", f32(n((2, 1, 3, 4))), [2, 1, 7, 5], mode="linear",
       coordinate_transformation_mode="align_corners", desc="bilinear align_corners up")
    rs("op_resize_linear_asymmetric", f32(n((1, 3, 5, 5))), [1, 3, 8, 3], mode="linear",
       coordinate_transformation_mode="asymmetric", desc="bilinear asymmetric, up on H and down on W")
    rs("op_resize_linear_pytorch_half_pixel", f32(n((1, 1, 6, 6))), [1, 1, 1, 4], mode="linear",
       coordinate_transformation_mode="pytorch_half_pixel", desc="bilinear pytorch_half_pixel, H to 1 (reads row 0)")

    # ---- a small CNN chaining the family ----
    r = rng_for("cnn_chain")
    n = r.standard_normal
    gb = G.GB("op_cnn_chain")
    gb.input("x", (1, 3, 16, 16))
    params = {}
    def P(id, arr):
        params[id] = (arr, "f32")
        return gb.param(id, arr.shape)
    gb.op("c1", "conv2d", ["x", P("w1", f32(n((8, 3, 3, 3)) / 5)), P("b1", f32(n(8) * 0.1))], strides=[2, 2],
          pads=[1, 1, 1, 1])
    gb.op("r1", "relu", ["c1"])
    gb.op("p1", "max_pool2d", ["r1"], kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    gb.op("dw", "conv2d", ["p1", P("w2", f32(n((8, 1, 3, 3)) / 3))], groups=8, pads=[1, 1, 1, 1])
    gb.op("pw", "conv2d", ["dw", P("w3", f32(n((16, 8, 1, 1)) / 3)), P("b3", f32(n(16) * 0.1))])
    gb.op("up", "resize", ["pw"], sizes=[1, 16, 8, 8], mode="linear")
    gb.op("ct", "conv_transpose2d", ["up", P("w4", f32(n((16, 4, 2, 2)) / 4))], strides=[2, 2])
    gb.op("y", "avg_pool2d", ["ct"], kernel=[2, 2], strides=[2, 2])
    gb.output("y", "p1")
    G.add(G.Case("op_cnn_chain", gb, {"x": f32(n((1, 3, 16, 16)))}, params, "accumulate",
                 desc="conv s2 -> relu -> max_pool -> depthwise -> pointwise -> bilinear up -> conv_transpose -> avg_pool"))


def self_checks():
    """The conv reference against a plain 7-deep loop, and conv_transpose2d as conv2d's adjoint."""
    c = gl.Ctx("f64")
    r = np.random.default_rng(77)
    err = lambda m: (_ for _ in ()).throw(AssertionError(m))
    for (N, C, H, W, M, G, kH, kW, st, dl, pads) in [(2, 4, 6, 7, 6, 2, 3, 2, (2, 1), (1, 2), (1, 0, 2, 1)),
                                                      (1, 3, 5, 5, 3, 3, 3, 3, (1, 2), (2, 1), (2, 2, 0, 1))]:
        x = r.standard_normal((N, C, H, W))
        w = r.standard_normal((M, C // G, kH, kW))
        b = r.standard_normal(M)
        A = {"strides": list(st), "dilations": list(dl), "pads": list(pads), "groups": G}
        y = gc.conv(c, x, w, b, A, err, 2)
        pt, pl, pb, pr = pads
        OH, OW = y.shape[2:]
        ref = np.zeros_like(y)
        Cg, Mg = C // G, M // G
        for nn in range(N):
            for m in range(M):
                for oh in range(OH):
                    for ow in range(OW):
                        s = b[m]
                        for cl in range(Cg):
                            for i in range(kH):
                                for j in range(kW):
                                    ih, iw = oh * st[0] - pt + i * dl[0], ow * st[1] - pl + j * dl[1]
                                    if 0 <= ih < H and 0 <= iw < W:
                                        s += x[nn, (m // Mg) * Cg + cl, ih, iw] * w[m, cl, i, j]
                        ref[nn, m, oh, ow] = s
        assert np.max(np.abs(y - ref)) < 1e-12, "conv2d self-check"
        assert (OH, OW) == ((H + pt + pb - (kH - 1) * dl[0] - 1) // st[0] + 1, (W + pl + pr - (kW - 1) * dl[1] - 1) // st[1] + 1)
        # adjoint: <conv(x), v> == <x, conv_transpose(v)> with output_padding restoring x's size
        v = r.standard_normal(y.shape)
        wt = w  # conv_transpose2d's weight [C_in = M, C_out / G = C / G, kH, kW] is conv2d's, as in PyTorch
        opad = [H + pt + pb - ((OH - 1) * st[0] + (kH - 1) * dl[0] + 1),
                W + pl + pr - ((OW - 1) * st[1] + (kW - 1) * dl[1] + 1)]
        At = dict(A, output_padding=opad)
        xt = gc.conv_transpose(c, v, wt, None, At, err, 2)
        assert xt.shape == x.shape, (xt.shape, x.shape)
        lhs = np.sum((y - b[None, :, None, None]) * v)
        assert abs(lhs - np.sum(x * xt)) < 1e-9 * max(1.0, abs(lhs)), "conv_transpose2d adjoint self-check"
    # pools: max_pool2d by explicit windows, avg_pool2d divisor rule written out
    x = r.standard_normal((1, 1, 7, 6))
    A = {"kernel": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "dilations": [1, 1], "ceil_mode": True,
         "count_include_pad": True}
    ym = gc.max_pool(c, x, A, err, 2)
    ya = gc.avg_pool(c, x, A, err, 2)
    for oh in range(ym.shape[2]):
        for ow in range(ym.shape[3]):
            hs, ws = oh * 2 - 1, ow * 2 - 0
            vals = [x[0, 0, h, w_] for h in range(hs, hs + 3) for w_ in range(ws, ws + 2) if 0 <= h < 7 and 0 <= w_ < 6]
            assert ym[0, 0, oh, ow] == max(vals)
            div = (min(hs + 3, 7 + 1) - hs) * (min(ws + 2, 6 + 1) - ws)
            assert abs(ya[0, 0, oh, ow] - sum(vals) / div) < 1e-12, "avg_pool2d self-check"
    self_checks_3d(c, r, err)
    # resize linear: np.interp against the two-tap formula
    x = r.standard_normal((1, 1, 4, 5))
    y = gc.resize(c, x, {"sizes": [1, 1, 7, 3], "scales": None, "mode": "linear",
                         "coordinate_transformation_mode": "half_pixel", "nearest_mode": "floor"}, err)
    def taps(L, O, o):
        v = min(max((o + 0.5) * L / O - 0.5, 0), L - 1)
        i0 = int(math.floor(v))
        return i0, min(i0 + 1, L - 1), v - i0
    for oh in range(7):
        h0, h1, a = taps(4, 7, oh)
        for ow in range(3):
            w0, w1, b_ = taps(5, 3, ow)
            ref = (1 - a) * ((1 - b_) * x[0, 0, h0, w0] + b_ * x[0, 0, h0, w1]) + a * ((1 - b_) * x[0, 0, h1, w0] + b_ * x[0, 0, h1, w1])
            assert abs(y[0, 0, oh, ow] - ref) < 1e-12, "resize linear self-check"


def build_3d(G, conv):
    """The 3-D forms (NCDHW; issue 30): strides, dilations, groups, asymmetric pads, ceil_mode and
    count_include_pad on the depth axis as on the others."""
    f32, single, rng_for = G.f32, G.single, G.rng_for
    r = rng_for("conv3d")
    n = r.standard_normal
    conv("op_conv3d_3x3x3_p1", f32(n((1, 3, 5, 9, 8))), f32(n((6, 3, 3, 3, 3)) / 9), f32(n(6) * 0.1),
         op="conv3d", pads=[1, 1, 1, 1, 1, 1], desc="3x3x3 pad 1 (r3d_18's block conv), several vol2col tiles, bias")
    conv("op_conv3d_stem_strides", f32(n((2, 3, 6, 11, 10))), f32(n((4, 3, 3, 5, 5)) / 9), op="conv3d",
         strides=[1, 2, 2], pads=[1, 2, 2, 1, 2, 2], desc="3x5x5 strides [1,2,2] (a video stem), batch 2, no bias")
    conv("op_conv3d_groups_dilation_asym", f32(n((1, 4, 7, 6, 8))), f32(n((6, 2, 2, 3, 2)) / 4), f32(n(6) * 0.1),
         op="conv3d", groups=2, dilations=[2, 1, 3], strides=[2, 1, 1], pads=[1, 0, 2, 0, 1, 1],
         desc="groups 2, dilations [2,1,3], strides [2,1,1], asymmetric pads [front 1, top 0, left 2, back 0, bottom 1, right 1]")
    conv("op_conv3d_depthwise_separable", f32(n((1, 4, 6, 7, 7))), f32(n((4, 1, 3, 1, 1)) / 2), op="conv3d",
         groups=4, pads=[1, 0, 0, 1, 0, 0], desc="depthwise 3x1x1 (temporal only, as (2+1)-D and S3D factorise)")
    conv("op_conv3d_pointwise", f32(n((2, 6, 3, 4, 5))), f32(n((5, 6, 1, 1, 1)) / 3), f32(n(5) * 0.1), op="conv3d",
         desc="1x1x1 (reads x directly), batch 2, bias")
    conv("op_conv_transpose3d_s2_outpad_groups", f32(n((1, 4, 3, 4, 5))), f32(n((4, 3, 3, 2, 3)) / 4), f32(n(6) * 0.1),
         op="conv_transpose3d", groups=2, strides=[2, 2, 1], pads=[1, 0, 1, 1, 1, 0], output_padding=[1, 1, 0],
         dilations=[1, 1, 2], desc="groups 2, strides [2,2,1], dilation 2 on W, asymmetric pads, output_padding [1,1,0], bias")
    conv("op_conv_transpose3d_k2s2", f32(n((2, 3, 2, 3, 3))), f32(n((3, 2, 2, 2, 2)) / 2), op="conv_transpose3d",
         strides=[2, 2, 2], desc="2x2x2 stride 2 (3-D U-Net upsampling), batch 2")
    r = rng_for("pool3d")
    n = r.standard_normal
    single("op_max_pool3d_stem", "max_pool3d", [("x", f32(n((1, 3, 5, 9, 9))), "input")],
           {"kernel": [3, 3, 3], "strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1]}, desc="3x3x3 stride 2 pad 1 (mc3/r3d-style)")
    single("op_max_pool3d_ceil_dilation", "max_pool3d", [("x", f32(n((2, 2, 7, 6, 8))), "input")],
           {"kernel": [2, 2, 3], "strides": [2, 1, 2], "dilations": [2, 1, 1], "pads": [1, 0, 1, 0, 1, 1], "ceil_mode": True},
           desc="ceil_mode, dilation 2 on D, asymmetric pads, batch 2")
    neg = f32(-np.abs(n((1, 2, 3, 4, 4))) - 1)
    single("op_max_pool3d_negative_padded", "max_pool3d", [("x", neg, "input")],
           {"kernel": [3, 3, 3], "pads": [1, 1, 1, 1, 1, 1]}, desc="all-negative input, pad 1: padding never wins")
    single("op_avg_pool3d_pad_exclude_ceil", "avg_pool3d", [("x", f32(n((1, 3, 5, 7, 6))), "input")],
           {"kernel": [3, 3, 2], "strides": [2, 2, 2], "pads": [1, 1, 0, 1, 0, 1], "ceil_mode": True}, family="reduction",
           desc="count_include_pad false, ceil_mode, asymmetric pads: edges divide by the real elements")
    single("op_avg_pool3d_pad_include", "avg_pool3d", [("x", f32(n((2, 2, 4, 5, 5))), "input")],
           {"kernel": [2, 3, 3], "strides": [1, 2, 2], "pads": [1, 1, 1, 0, 1, 1], "count_include_pad": True,
            "ceil_mode": True}, family="reduction", desc="count_include_pad with ceil_mode: the divisor counts pads, not the overhang")


def self_checks_3d(c, r, err):
    """conv3d against a plain loop, conv_transpose3d as its adjoint, the 3-D pools by explicit windows."""
    N, C, D, H, W, M, G = 1, 4, 4, 5, 4, 4, 2
    k, st, dl, pads = (2, 3, 2), (2, 1, 2), (1, 2, 1), (1, 2, 0, 0, 1, 1)
    x = r.standard_normal((N, C, D, H, W))
    w = r.standard_normal((M, C // G) + k)
    b = r.standard_normal(M)
    A = {"strides": list(st), "dilations": list(dl), "pads": list(pads), "groups": G}
    y = gc.conv(c, x, w, b, A, err, 3)
    OD, OH, OW = y.shape[2:]
    Cg, Mg = C // G, M // G
    ref = np.zeros_like(y)
    for m in range(M):
        for od in range(OD):
            for oh in range(OH):
                for ow in range(OW):
                    s = b[m]
                    for cl in range(Cg):
                        for i in range(k[0]):
                            for j in range(k[1]):
                                for l in range(k[2]):
                                    idd = od * st[0] - pads[0] + i * dl[0]
                                    ih = oh * st[1] - pads[1] + j * dl[1]
                                    iw = ow * st[2] - pads[2] + l * dl[2]
                                    if 0 <= idd < D and 0 <= ih < H and 0 <= iw < W:
                                        s += x[0, (m // Mg) * Cg + cl, idd, ih, iw] * w[m, cl, i, j, l]
                    ref[0, m, od, oh, ow] = s
    assert np.max(np.abs(y - ref)) < 1e-12, "conv3d self-check"
    v = r.standard_normal(y.shape)
    opad = [(D, H, W)[a] + pads[a] + pads[3 + a] - ((y.shape[2 + a] - 1) * st[a] + (k[a] - 1) * dl[a] + 1) for a in range(3)]
    xt = gc.conv_transpose(c, v, w, None, dict(A, output_padding=opad), err, 3)
    assert xt.shape == x.shape, (xt.shape, x.shape)
    lhs = np.sum((y - b[None, :, None, None, None]) * v)
    assert abs(lhs - np.sum(x * xt)) < 1e-9 * max(1.0, abs(lhs)), "conv_transpose3d adjoint self-check"
    x = r.standard_normal((1, 1, 5, 4, 6))
    A = {"kernel": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 1, 0, 0, 1, 1], "dilations": [1, 1, 1], "ceil_mode": True,
         "count_include_pad": True}
    ym = gc.max_pool(c, x, A, err, 3)
    ya = gc.avg_pool(c, x, A, err, 3)
    for od in range(ym.shape[2]):
        for oh in range(ym.shape[3]):
            for ow in range(ym.shape[4]):
                ds, hs, ws = od * 2 - 1, oh - 1, ow * 2
                vals = [x[0, 0, a, b_, c_] for a in range(ds, ds + 2) for b_ in range(hs, hs + 3) for c_ in range(ws, ws + 2)
                        if 0 <= a < 5 and 0 <= b_ < 4 and 0 <= c_ < 6]
                assert ym[0, 0, od, oh, ow] == max(vals)
                div = (min(ds + 2, 5 + 0) - ds) * (min(hs + 3, 4 + 1) - hs) * (min(ws + 2, 6 + 1) - ws)
                assert abs(ya[0, 0, od, oh, ow] - sum(vals) / div) < 1e-12, "avg_pool3d self-check"


def bad_graphs(doc):
    """Malformed graphs: [(file, text, node id, alternatives, what)]."""
    X = {"id": "x", "op": "input", "shape": [1, 6, 5, 5]}
    return [
        ("conv2d_groups_mismatch.json",
         doc([X, {"id": "w", "op": "param", "shape": [4, 3, 3, 3]},
              {"id": "cv", "op": "conv2d", "inputs": ["x", "w"], "attrs": {"groups": 4}}], ["cv"]),
         "cv", [], "conv2d: 6 input channels are not divisible by groups 4"),
        ("conv2d_kernel_too_large.json",
         doc([X, {"id": "w", "op": "param", "shape": [2, 6, 7, 3]},
              {"id": "cv", "op": "conv2d", "inputs": ["x", "w"], "attrs": {"pads": [0, 0, 1, 0]}}], ["cv"]),
         "cv", [], "conv2d: a 7x3 kernel over a 5x5 input padded to 6x5"),
        ("max_pool2d_pad_too_large.json",
         doc([X, {"id": "mp", "op": "max_pool2d", "inputs": ["x"], "attrs": {"kernel": [2, 2], "pads": [2, 0, 0, 0]}}],
             ["mp"]), "mp", [], "max_pool2d: a pad of 2 with a 2x2 window (a window of padding only)"),
        ("resize_sizes_rank.json",
         doc([X, {"id": "rz", "op": "resize", "inputs": ["x"], "attrs": {"sizes": [1, 6, 10]}}], ["rz"]),
         "rz", [], "resize: sizes has 3 entries for a rank-4 input"),
    ]
