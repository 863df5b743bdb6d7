"""NumPy reference for the convolution family of the graph format (conv2d, conv_transpose2d,
max_pool2d, avg_pool2d, their 3-D forms conv3d, conv_transpose3d, max_pool3d, avg_pool3d, and
resize), ONNX semantics, NCHW / NCDHW (the functions below take any number of spatial axes). Part of scripts/graphlib.py's independent
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
import itertools
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
# The 3-D forms (NCDHW): lists of 3 (strides, dilations, kernel, output_padding) and 6 (pads:
# front, top, left, back, bottom, right).
SPATIAL_OPS.update({
    op.replace("2d", "3d"): (lo, hi, {k: (t, None if v is None else [v[0]] * (len(v) * 3 // 2)) if t == "ints" else (t, v)
                                      for k, (t, v) in attrs.items()})
    for op, (lo, hi, attrs) in list(SPATIAL_OPS.items()) if op.endswith("2d")})
REQUIRED = {("max_pool2d", "kernel"), ("avg_pool2d", "kernel"), ("max_pool3d", "kernel"), ("avg_pool3d", "kernel"),
            ("resize", "sizes")}


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


def _nd(op):
    """Spatial axes of an op of the family: 3 for the *3d ops (NCDHW), else 2 (NCHW)."""
    return 3 if op.endswith("3d") else 2


def _all(nd):
    return (slice(None), slice(None))


def _taps(k, d, s, out):
    """Every kernel tap (a tuple of kernel indices) with its strided view: the slices of the
    positions it reads (conv, pools) or writes (conv_transpose) along the spatial axes."""
    for t in itertools.product(*[range(n) for n in k]):
        yield t, tuple(slice(t[a] * d[a], t[a] * d[a] + s[a] * (out[a] - 1) + 1, s[a]) for a in range(len(k)))


def conv(c, x, w, b, A, err, nd):
    x, w = c.f(x), c.f(w)
    if x.ndim != nd + 2 or w.ndim != nd + 2:
        err(f"conv{nd}d needs x and w of rank {nd + 2}, got {list(x.shape)} and {list(w.shape)}")
    N, C, sp = x.shape[0], x.shape[1], x.shape[2:]
    M, Cg, k = w.shape[0], w.shape[1], w.shape[2:]
    s = _list(A, "strides", nd, 1, err)
    d = _list(A, "dilations", nd, 1, err)
    p = _list(A, "pads", 2 * nd, 0, err)
    p0, p1 = p[:nd], p[nd:]
    G = A["groups"]
    if G < 1 or C % G or M % G or C // G != Cg:
        err(f"channels do not fit groups {G}: x {list(x.shape)}, w {list(w.shape)}")
    ext = [(k[a] - 1) * d[a] + 1 for a in range(nd)]
    padded = [sp[a] + p0[a] + p1[a] for a in range(nd)]
    if any(ext[a] > padded[a] for a in range(nd)):
        err(f"kernel {ext} larger than the padded input {padded}")
    if b is not None and np.shape(b) != (M,):
        err(f"bias must be [{M}], got {list(np.shape(b))}")
    out = [(padded[a] - ext[a]) // s[a] + 1 for a in range(nd)]
    xp = np.zeros((N, C) + tuple(padded), dtype=c.F)
    xp[_all(nd) + tuple(slice(p0[a], p0[a] + sp[a]) for a in range(nd))] = x
    Mg = M // G
    y = np.zeros((N, M) + tuple(out), dtype=c.F)
    for g in range(G):
        xg = xp[:, g * Cg:(g + 1) * Cg]
        for t, sl in _taps(k, d, s, out):
            y[:, g * Mg:(g + 1) * Mg] += np.einsum("nc...,mc->nm...", xg[_all(nd) + sl], w[(slice(g * Mg, (g + 1) * Mg), slice(None)) + t])
    if b is not None:
        y += c.f(b).reshape((1, M) + (1,) * nd)
    return y


def conv_transpose(c, x, w, b, A, err, nd):
    x, w = c.f(x), c.f(w)
    if x.ndim != nd + 2 or w.ndim != nd + 2:
        err(f"conv_transpose{nd}d needs x and w of rank {nd + 2}, got {list(x.shape)} and {list(w.shape)}")
    N, C, sp = x.shape[0], x.shape[1], x.shape[2:]
    Cw, Mg, k = w.shape[0], w.shape[1], w.shape[2:]
    s = _list(A, "strides", nd, 1, err)
    d = _list(A, "dilations", nd, 1, err)
    p = _list(A, "pads", 2 * nd, 0, err)
    p0, p1 = p[:nd], p[nd:]
    op = _list(A, "output_padding", nd, 0, err)
    G = A["groups"]
    if G < 1 or C % G or Cw != C:
        err(f"channels do not fit groups {G}: x {list(x.shape)}, w {list(w.shape)}")
    if any(op[a] >= max(s[a], d[a]) for a in range(nd)):
        err(f"output_padding {op} must be smaller than the stride or the dilation")
    M, Cg = Mg * G, C // G
    if b is not None and np.shape(b) != (M,):
        err(f"bias must be [{M}], got {list(np.shape(b))}")
    full_len = [s[a] * (sp[a] - 1) + (k[a] - 1) * d[a] + 1 + op[a] for a in range(nd)]
    if any(full_len[a] - p0[a] - p1[a] < 1 for a in range(nd)):
        err("the pads remove the whole output")
    full = np.zeros((N, M) + tuple(full_len), dtype=c.F)
    for g in range(G):
        xg = x[:, g * Cg:(g + 1) * Cg]
        for t, sl in _taps(k, d, s, sp):
            full[(slice(None), slice(g * Mg, (g + 1) * Mg)) + sl] += \
                np.einsum("nc...,cm->nm...", xg, w[(slice(g * Cg, (g + 1) * Cg), slice(None)) + t])
    y = full[_all(nd) + tuple(slice(p0[a], full_len[a] - p1[a]) for a in range(nd))]
    if b is not None:
        y = y + c.f(b).reshape((1, M) + (1,) * nd)
    return np.ascontiguousarray(y)


def _pool_setup(x, A, err, dilated, nd):
    if x.ndim != nd + 2:
        err(f"pooling needs x of rank {nd + 2}, got {list(x.shape)}")
    sp = x.shape[2:]
    k = _list(A, "kernel", nd, 1, err)
    s = _list(A, "strides", nd, 1, err)
    d = _list(A, "dilations", nd, 1, err) if dilated else [1] * nd
    p = _list(A, "pads", 2 * nd, 0, err)
    p0, p1 = p[:nd], p[nd:]
    ext = [(k[a] - 1) * d[a] + 1 for a in range(nd)]
    if any(max(p0[a], p1[a]) >= ext[a] for a in range(nd)):
        err(f"pads {p} must be smaller than the window {ext}")
    if any(ext[a] > sp[a] + p0[a] + p1[a] for a in range(nd)):
        err(f"window {ext} larger than the padded input")
    out = [_pool_len(sp[a], p0[a], p1[a], ext[a], s[a], A["ceil_mode"]) for a in range(nd)]
    # room for every window, including ceil_mode's overhang past the padding
    room = [max(sp[a] + p0[a] + p1[a], (out[a] - 1) * s[a] + ext[a]) for a in range(nd)]
    inside = tuple(slice(p0[a], p0[a] + sp[a]) for a in range(nd))
    return k, s, d, p0, p1, out, room, inside


def max_pool(c, x, A, err, nd):
    x = c.f(x)
    k, s, d, p0, p1, out, room, inside = _pool_setup(x, A, err, True, nd)
    xp = np.full(x.shape[:2] + tuple(room), -np.inf, dtype=c.F)
    xp[_all(nd) + inside] = x
    y = np.full(x.shape[:2] + tuple(out), -np.inf, dtype=c.F)
    for _, sl in _taps(k, d, s, out):
        y = np.maximum(y, xp[_all(nd) + sl])
    return y


def avg_pool(c, x, A, err, nd):
    x = c.f(x)
    k, s, d, p0, p1, out, room, inside = _pool_setup(x, A, err, False, nd)
    sp = x.shape[2:]
    xp = np.zeros(x.shape[:2] + tuple(room), dtype=c.F)
    xp[_all(nd) + inside] = x
    count = np.zeros(tuple(room))  # which positions a window's divisor counts
    if A["count_include_pad"]:
        count[tuple(slice(0, sp[a] + p0[a] + p1[a]) for a in range(nd))] = 1  # the padded input, not ceil_mode's overhang
    else:
        count[inside] = 1
    total = np.zeros(x.shape[:2] + tuple(out), dtype=c.F)
    div = np.zeros(tuple(out))
    for _, sl in _taps(k, d, s, out):
        total = total + xp[_all(nd) + sl]
        div = div + count[sl]
    return total / c.f(div)


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
    nd = _nd(op)
    if op.startswith("conv_transpose"):
        return conv_transpose(c, X[0], X[1], X[2] if len(X) > 2 else None, A, err, nd)
    if op.startswith("conv"):
        return conv(c, X[0], X[1], X[2] if len(X) > 2 else None, A, err, nd)
    if op.startswith("max_pool"):
        return max_pool(c, X[0], A, err, nd)
    if op.startswith("avg_pool"):
        return avg_pool(c, X[0], A, err, nd)
    return resize(c, X[0], A, err)
