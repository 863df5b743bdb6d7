"""NumPy reference for the convolution family of the graph format (conv2d, conv_transpose2d,
max_pool2d, avg_pool2d, resize), ONNX semantics, NCHW. Part of scripts/graphlib.py's independent
interpreter: it knows nothing about the C++ code. Written from the definitions, as sums over kernel
taps of strided views (einsum over channels), never as im2col / col2im or index tables:

  conv2d            y[n, m, oh, ow] = b[m] + sum_{c in group(m), kh, kw}
                                      xpad[n, c, oh*sH + kh*dH, ow*sW + kw*dW] * w[m, c', kh, kw]
  conv_transpose2d  every x[n, c, ih, iw] * w[c, m, kh, kw] lands on
                    full[n, m, ih*sH + kh*dH, iw*sW + kw*dW]; full (with output_padding at the end)
                    is cropped by the pads
  max_pool2d        max over windows of x padded with -inf
  avg_pool2d        window sums of x padded with zeros, divided by window sums of a count mask
  resize            nearest: per-axis index arrays; linear: np.interp along W then H
"""
import math

import numpy as np

SPATIAL_OPS = {
    "conv2d": (2, 3, {"strides": ("ints", [1, 1]), "pads": ("ints", [0, 0, 0, 0]),
                      "dilations": ("ints", [1, 1]), "groups": ("int", 1)}),
    "conv_transpose2d": (2, 3, {"strides": ("ints", [1, 1]), "pads": ("ints", [0, 0, 0, 0]),
                                "dilations": ("ints", [1, 1]), "groups": ("int", 1),
                                "output_padding": ("ints", [0, 0])}),
    "max_pool2d": (1, 1, {"kernel": ("ints", None), "strides": ("ints", [1, 1]), "pads": ("ints", [0, 0, 0, 0]),
                          "dilations": ("ints", [1, 1]), "ceil_mode": ("bool", False)}),
    "avg_pool2d": (1, 1, {"kernel": ("ints", None), "strides": ("ints", [1, 1]), "pads": ("ints", [0, 0, 0, 0]),
                          "ceil_mode": ("bool", False), "count_include_pad": ("bool", False)}),
    "resize": (1, 1, {"sizes": ("ints", None), "scales": ("floats", None),
                      "mode": ("enum:nearest,linear", "nearest"),
                      "coordinate_transformation_mode": (
                          "enum:half_pixel,asymmetric,align_corners,pytorch_half_pixel,tf_half_pixel_for_nn",
                          "half_pixel"),
                      "nearest_mode": ("enum:round_prefer_floor,round_prefer_ceil,floor,ceil",
                                       "round_prefer_floor")}),
}
REQUIRED = {("max_pool2d", "kernel"), ("avg_pool2d", "kernel"), ("resize", "sizes")}


def _list(A, key, count, lo, err):
    v = A[key]
    if len(v) != count or any(e < lo for e in v):
        err(f"'{key}' must be {count} integers >= {lo}, got {v}")
    return list(v)


def _pool_len(n, p0, p1, ext, s, ceil_mode):
    """Output length of a window sweep: floor((n + p0 + p1 - ext) / s) + 1, or with ceil_mode the
    ceiling, dropping a last window that starts at or past n + p0 (ONNX / PyTorch)."""
    span = n + p0 + p1 - ext
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p0:
        out -= 1
    return out


def conv2d(c, x, w, b, A, err):
    x, w = c.f(x), c.f(w)
    if x.ndim != 4 or w.ndim != 4:
        err(f"conv2d needs x [N,C,H,W] and w [M,C/groups,kH,kW], got {list(x.shape)} and {list(w.shape)}")
    N, C, H, W = x.shape
    M, Cg, kH, kW = w.shape
    sH, sW = _list(A, "strides", 2, 1, err)
    dH, dW = _list(A, "dilations", 2, 1, err)
    pt, pl, pb, pr = _list(A, "pads", 4, 0, err)
    G = A["groups"]
    if G < 1 or C % G or M % G or C // G != Cg:
        err(f"channels do not fit groups {G}: x {list(x.shape)}, w {list(w.shape)}")
    eh, ew = (kH - 1) * dH + 1, (kW - 1) * dW + 1
    if eh > H + pt + pb or ew > W + pl + pr:
        err(f"kernel {eh}x{ew} larger than the padded input {H + pt + pb}x{W + pl + pr}")
    if b is not None and np.shape(b) != (M,):
        err(f"bias must be [{M}], got {list(np.shape(b))}")
    OH, OW = (H + pt + pb - eh) // sH + 1, (W + pl + pr - ew) // sW + 1
    xp = np.zeros((N, C, H + pt + pb, W + pl + pr), dtype=c.F)
    xp[:, :, pt:pt + H, pl:pl + W] = x
    Mg = M // G
    y = np.zeros((N, M, OH, OW), dtype=c.F)
    for g in range(G):
        xg = xp[:, g * Cg:(g + 1) * Cg]
        for i in range(kH):
            for j in range(kW):
                patch = xg[:, :, i * dH:i * dH + sH * (OH - 1) + 1:sH, j * dW:j * dW + sW * (OW - 1) + 1:sW]
                y[:, g * Mg:(g + 1) * Mg] += np.einsum("nchw,mc->nmhw", patch, w[g * Mg:(g + 1) * Mg, :, i, j])
    if b is not None:
        y += c.f(b)[None, :, None, None]
    return y


def conv_transpose2d(c, x, w, b, A, err):
    x, w = c.f(x), c.f(w)
    if x.ndim != 4 or w.ndim != 4:
        err(f"conv_transpose2d needs x [N,C,H,W] and w [C,M/groups,kH,kW], got {list(x.shape)} and {list(w.shape)}")
    N, C, H, W = x.shape
    Cw, Mg, kH, kW = w.shape
    sH, sW = _list(A, "strides", 2, 1, err)
    dH, dW = _list(A, "dilations", 2, 1, err)
    pt, pl, pb, pr = _list(A, "pads", 4, 0, err)
    oph, opw = _list(A, "output_padding", 2, 0, err)
    G = A["groups"]
    if G < 1 or C % G or Cw != C:
        err(f"channels do not fit groups {G}: x {list(x.shape)}, w {list(w.shape)}")
    if oph >= max(sH, dH) or opw >= max(sW, dW):
        err(f"output_padding {[oph, opw]} must be smaller than the stride or the dilation")
    M, Cg = Mg * G, C // G
    if b is not None and np.shape(b) != (M,):
        err(f"bias must be [{M}], got {list(np.shape(b))}")
    Hf, Wf = sH * (H - 1) + (kH - 1) * dH + 1 + oph, sW * (W - 1) + (kW - 1) * dW + 1 + opw
    if Hf - pt - pb < 1 or Wf - pl - pr < 1:
        err("the pads remove the whole output")
    full = np.zeros((N, M, Hf, Wf), dtype=c.F)
    for g in range(G):
        xg = x[:, g * Cg:(g + 1) * Cg]
        for i in range(kH):
            for j in range(kW):
                full[:, g * Mg:(g + 1) * Mg, i * dH:i * dH + sH * (H - 1) + 1:sH, j * dW:j * dW + sW * (W - 1) + 1:sW] += \
                    np.einsum("nchw,cm->nmhw", xg, w[g * Cg:(g + 1) * Cg, :, i, j])
    y = full[:, :, pt:Hf - pb, pl:Wf - pr]
    if b is not None:
        y = y + c.f(b)[None, :, None, None]
    return np.ascontiguousarray(y)


def _pool_setup(x, A, err, dilated):
    if x.ndim != 4:
        err(f"pooling needs x [N,C,H,W], got {list(x.shape)}")
    N, C, H, W = x.shape
    kH, kW = _list(A, "kernel", 2, 1, err)
    sH, sW = _list(A, "strides", 2, 1, err)
    dH, dW = _list(A, "dilations", 2, 1, err) if dilated else (1, 1)
    pt, pl, pb, pr = _list(A, "pads", 4, 0, err)
    eh, ew = (kH - 1) * dH + 1, (kW - 1) * dW + 1
    if max(pt, pb) >= eh or max(pl, pr) >= ew:
        err(f"pads {[pt, pl, pb, pr]} must be smaller than the window {eh}x{ew}")
    if eh > H + pt + pb or ew > W + pl + pr:
        err(f"window {eh}x{ew} larger than the padded input")
    OH = _pool_len(H, pt, pb, eh, sH, A["ceil_mode"])
    OW = _pool_len(W, pl, pr, ew, sW, A["ceil_mode"])
    # room for every window, including ceil_mode's overhang past the padding
    Hx = max(H + pt + pb, (OH - 1) * sH + eh)
    Wx = max(W + pl + pr, (OW - 1) * sW + ew)
    return (N, C, H, W, kH, kW, sH, sW, dH, dW, pt, pl, pb, pr, OH, OW, Hx, Wx)


def _windows(a, kH, kW, sH, sW, dH, dW, OH, OW):
    for i in range(kH):
        for j in range(kW):
            yield a[..., i * dH:i * dH + sH * (OH - 1) + 1:sH, j * dW:j * dW + sW * (OW - 1) + 1:sW]


def max_pool2d(c, x, A, err):
    x = c.f(x)
    N, C, H, W, kH, kW, sH, sW, dH, dW, pt, pl, pb, pr, OH, OW, Hx, Wx = _pool_setup(x, A, err, True)
    xp = np.full((N, C, Hx, Wx), -np.inf, dtype=c.F)
    xp[:, :, pt:pt + H, pl:pl + W] = x
    y = np.full((N, C, OH, OW), -np.inf, dtype=c.F)
    for v in _windows(xp, kH, kW, sH, sW, dH, dW, OH, OW):
        y = np.maximum(y, v)
    return y


def avg_pool2d(c, x, A, err):
    x = c.f(x)
    N, C, H, W, kH, kW, sH, sW, dH, dW, pt, pl, pb, pr, OH, OW, Hx, Wx = _pool_setup(x, A, err, False)
    xp = np.zeros((N, C, Hx, Wx), dtype=c.F)
    xp[:, :, pt:pt + H, pl:pl + W] = x
    count = np.zeros((Hx, Wx))  # which positions a window's divisor counts
    if A["count_include_pad"]:
        count[:H + pt + pb, :W + pl + pr] = 1  # the padded input, not ceil_mode's overhang
    else:
        count[pt:pt + H, pl:pl + W] = 1
    s = np.zeros((N, C, OH, OW), dtype=c.F)
    for v in _windows(xp, kH, kW, sH, sW, 1, 1, OH, OW):
        s = s + v
    div = sum(_windows(count, kH, kW, sH, sW, 1, 1, OH, OW))
    return s / c.f(div)


def _source_coord(o, L, O, scale, mode):
    x = float(o)
    if scale == 1:  # ONNX Runtime: a scale of 1 leaves the axis as it is, whatever the transform
        return x
    if mode == "asymmetric":
        return x / scale
    if mode == "align_corners":
        return 0.0 if O == 1 else x * (L - 1) / (O - 1)
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if O > 1 else 0.0
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    return (x + 0.5) / scale - 0.5  # half_pixel


def _nearest(v, mode):
    if mode == "floor":
        return math.floor(v)
    if mode == "ceil":
        return math.ceil(v)
    if v - math.floor(v) == 0.5:
        return math.floor(v) if mode == "round_prefer_floor" else math.ceil(v)
    return math.floor(v + 0.5)


def resize(c, x, A, err):
    x = c.f(x)
    sizes = list(A["sizes"])
    r = x.ndim
    if len(sizes) != r or any(s < 0 for s in sizes):
        err(f"sizes {sizes} must give one non-negative size per axis of {list(x.shape)}")
    if any(x.shape[a] == 0 and sizes[a] != 0 for a in range(r)):
        err("cannot resize an empty axis")
    scales = A["scales"]
    if scales is not None and (len(scales) != r or any(not s > 0 for s in scales)):
        err(f"scales {scales} must give one positive scale per axis")
    ct = A["coordinate_transformation_mode"]

    def coords(a):
        L, O = x.shape[a], sizes[a]
        s = scales[a] if scales is not None else O / L
        return [_source_coord(o, L, O, s, ct) for o in range(O)]

    if A["mode"] == "nearest":
        idx = []
        for a in range(r):
            L = x.shape[a]
            idx.append(np.array([min(max(_nearest(v, A["nearest_mode"]), 0), L - 1) for v in coords(a)], dtype=np.int64))
        return x[np.ix_(*idx)] if r else x.copy()
    for a in range(r - 2):
        if sizes[a] != x.shape[a]:
            err(f"linear mode resizes the last two axes only; axis {a} changes {x.shape[a]} -> {sizes[a]}")
    y = x
    for a in range(max(r - 2, 0), r):  # np.interp along each of the last two axes (clamps at the ends)
        L = x.shape[a]
        q = np.asarray(coords(a))
        grid = np.arange(L, dtype=np.float64)
        moved = np.moveaxis(y, a, -1)
        flat = moved.reshape(-1, L)
        out = np.stack([np.interp(q, grid, row.astype(np.float64)) for row in flat]) if flat.size else \
            np.zeros((0, len(q)))
        y = np.moveaxis(c.f(out).reshape(moved.shape[:-1] + (len(q),)), -1, a)
    return np.ascontiguousarray(y)


def eval_spatial(c, op, X, T, A, err):
    for i, t in enumerate(T):
        if t not in ("f32", "f16", "bf16"):
            err(f"input {i} must be a float tensor, is {t}")
    if op == "conv2d":
        return conv2d(c, X[0], X[1], X[2] if len(X) > 2 else None, A, err)
    if op == "conv_transpose2d":
        return conv_transpose2d(c, X[0], X[1], X[2] if len(X) > 2 else None, A, err)
    if op == "max_pool2d":
        return max_pool2d(c, X[0], A, err)
    if op == "avg_pool2d":
        return avg_pool2d(c, X[0], A, err)
    return resize(c, X[0], A, err)
