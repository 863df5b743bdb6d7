#!/usr/bin/env python3
"""rlx against ONNX Runtime (onnxruntime-node, CPU provider) on the same model, same data, same
thread count, side by side in rounds on this machine.

Two ways to give it a model:

  bench/compare_ort.py [--graphs matmul_2048,gelu_chain,decoder_block,decode_step]
      The standard bench graphs (bench/graphs/*.json). For each one this script writes the same
      computation as an ONNX model with python3-onnx's helper (standard opset-17 ops, as
      torch.onnx would export it: weights as initializers, RMSNorm as Pow/ReduceMean/Add/Sqrt/
      Div/Mul so ORT can fuse it, RoPE tables precomputed, GQA by Expand, causal mask added),
      seeded weights (one safetensors file that rlx reads with --params, the same values as
      the ONNX initializers) and seeded inputs (.npy). rlx runs the JSON graph; no ONNX import
      is needed.

  bench/compare_ort.py --onnx MODEL.onnx [--graph GRAPH.json] [--params P.safetensors]
                       --inputs DIR
      Your own model. ORT runs MODEL.onnx with DIR/<input>.npy. rlx runs GRAPH.json (with
      --params and the same .npy inputs) when given, else MODEL.onnx itself, which NEEDS rlx's
      ONNX import (the `onnx` branch; without it rlx refuses the file and this script says so).
      GRAPH.json must compute the same thing as MODEL.onnx with the same weights: the value
      check below reports how far apart the outputs are.

onnxruntime-node is installed once with `npm install --ignore-scripts onnxruntime-node` into
--ort-dir (default $RLX_ORT_DIR or ~/.cache/rlx/onnxruntime-node); it is a test/benchmark
reference only, never a dependency of rlx.

Each round runs `rlx bench --modes compiled` then ORT (both: warm-up, then --reps timed runs,
median); the ratio rlx/ORT is taken per round and the table shows the median over rounds, so a
change in the machine's load hits both alike. Threads: --threads (default RLX_NUM_THREADS or 2)
for rlx (RLX_NUM_THREADS) and ORT (intraOpNumThreads, interOpNumThreads 1); ORT is timed with
its pool threads spinning (its default) and sleeping (allow_spinning 0), the faster kept. The compiled
output is checked against ORT's (max abs difference). The table gives medians (of per-round medians)
and minimums (the fastest single run of either side over all rounds).

For decode_step, every round also runs the streaming-read benchmark (`gemm_candidates bandwidth`:
rlx's pool reading the same 45 MB of weights, and 1 GiB) and reports the step's weight bytes / time
against it. --also-plain times rlx a second time per round with RLX_CPU_PLAIN_PLAN=1 (compiled plans
without prepacked weights and epilogue fusion).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import graphlib as gl  # noqa: E402  (scripts/graphlib.py: the project's safetensors writer)
D_MODEL, HQ, HKV, HEAD, FFN, SEQ, CACHE = 1024, 16, 4, 64, 2816, 256, 256
ORT_VERSION = "1.30.0"


def write_safetensors(path, tensors):
    """{name: array} -> an F32 safetensors file, by the project's own writer."""
    data = gl.encode_safetensors({k: (np.asarray(a, dtype=np.float32), "f32") for k, a in tensors.items()})
    with open(path, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- ONNX models of the bench graphs
def block_weights(rng):
    f32 = np.float32
    s = 1 / np.sqrt(D_MODEL)
    return {
        "input_layernorm.weight": (1 + 0.1 * rng.standard_normal(D_MODEL)).astype(f32),
        "self_attn.q_proj.weight": (s * rng.standard_normal((HQ * HEAD, D_MODEL))).astype(f32),
        "self_attn.k_proj.weight": (s * rng.standard_normal((HKV * HEAD, D_MODEL))).astype(f32),
        "self_attn.v_proj.weight": (s * rng.standard_normal((HKV * HEAD, D_MODEL))).astype(f32),
        "self_attn.o_proj.weight": (s * rng.standard_normal((D_MODEL, HQ * HEAD))).astype(f32),
        "post_attention_layernorm.weight": (1 + 0.1 * rng.standard_normal(D_MODEL)).astype(f32),
        "mlp.gate_proj.weight": (s * rng.standard_normal((FFN, D_MODEL))).astype(f32),
        "mlp.up_proj.weight": (s * rng.standard_normal((FFN, D_MODEL))).astype(f32),
        "mlp.down_proj.weight": ((1 / np.sqrt(FFN)) * rng.standard_normal((D_MODEL, FFN))).astype(f32),
    }


def make_case(name, rng):
    """(onnx ModelProto, weights dict, inputs dict of arrays, extra rlx --input specs)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    f32 = np.float32
    nodes, inits = [], []
    cnt = [0]

    def t(prefix="t"):
        cnt[0] += 1
        return f"{prefix}_{cnt[0]}"

    def node(op, ins, **attrs):
        out = t(op.lower())
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def const(value, dtype=f32):
        n = t("c")
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), n))
        return n

    def vi(n, shape, et=TensorProto.FLOAT):
        return helper.make_tensor_value_info(n, et, shape)

    def model(inputs, out, out_shape):
        nodes[-1].output[0] = "y"
        g = helper.make_graph(nodes, name, inputs, [vi("y", out_shape)], initializer=inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="rlx compare_ort")
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m

    if name.startswith("matmul_"):
        n = int(name.split("_")[1])
        X = {"a": rng.standard_normal((n, n), dtype=f32), "b": rng.standard_normal((n, n), dtype=f32)}
        node("MatMul", ["a", "b"])
        return model([vi("a", [n, n]), vi("b", [n, n])], "y", [n, n]), {}, X, []
    if name == "gelu_chain":
        shape = [4, 1000, 4096]
        X = {"x": rng.standard_normal(shape, dtype=f32)}
        h = node("Mul", ["x", const(0.7071067811865476)])
        h = node("Erf", [h])
        h = node("Add", [h, const(1.0)])
        h = node("Mul", [h, "x"])
        node("Mul", [h, const(0.5)])
        return model([vi("x", shape)], "y", shape), {}, X, []
    if name not in ("decoder_block", "decode_step"):
        raise SystemExit(f"compare_ort: no ONNX builder for graph {name}")

    decode = name == "decode_step"
    S = 1 if decode else SEQ
    W = block_weights(rng)
    for k, v in W.items():
        inits.append(numpy_helper.from_array(v, k))
    X = {"x": rng.standard_normal((1, S, D_MODEL), dtype=f32)}
    inputs = [vi("x", [1, S, D_MODEL])]
    if decode:
        X["k_cache"] = rng.standard_normal((1, HKV, CACHE, HEAD), dtype=f32)
        X["v_cache"] = rng.standard_normal((1, HKV, CACHE, HEAD), dtype=f32)
        X["pos"] = np.array(CACHE, dtype=np.int32)
        inputs += [vi("pos", [], TensorProto.INT32), vi("k_cache", [1, HKV, CACHE, HEAD]),
                   vi("v_cache", [1, HKV, CACHE, HEAD])]

    def rms(x, w):  # the pattern ORT fuses into SimplifiedLayerNormalization
        p = node("Pow", [x, const(2.0)])
        m = node("ReduceMean", [p], axes=[-1], keepdims=1)
        a = node("Add", [m, const(1e-5)])
        s = node("Sqrt", [a])
        d = node("Div", [x, s])
        return node("Mul", [d, w])

    def linear(x, w):
        return node("MatMul", [x, node("Transpose", [w], perm=[1, 0])])

    def heads(x, h):
        r = node("Reshape", [x, const([1, S, h, HEAD], np.int64)])
        return node("Transpose", [r], perm=[0, 2, 1, 3])

    inv = 1.0 / (10000.0 ** (np.arange(0, HEAD, 2, dtype=np.float64) / HEAD))
    if decode:  # angles from the pos input at run time
        p = node("Cast", ["pos"], to=TensorProto.FLOAT)
        ang = node("Mul", [p, const(np.concatenate([inv, inv]).astype(f32))])
        cos, sin = node("Cos", [ang]), node("Sin", [ang])
    else:  # tables precomputed, as models cache them
        a = np.arange(S, dtype=np.float64)[:, None] * inv[None, :]
        cos = const(np.concatenate([np.cos(a), np.cos(a)], -1).astype(f32))
        sin = const(np.concatenate([np.sin(a), np.sin(a)], -1).astype(f32))
    half = const([HEAD // 2, HEAD // 2], np.int64)

    def rope(x):
        x1, x2 = t("x1"), t("x2")
        nodes.append(helper.make_node("Split", [x, half], [x1, x2], axis=-1))
        rot = node("Concat", [node("Neg", [x2]), x1], axis=-1)
        return node("Add", [node("Mul", [x, cos]), node("Mul", [rot, sin])])

    def expand_kv(x, sk):  # [1, HKV, sk, HEAD] -> [1, HQ, sk, HEAD]: head h reads h // (HQ/HKV)
        g = HQ // HKV
        u = node("Reshape", [x, const([1, HKV, 1, sk, HEAD], np.int64)])
        e = node("Expand", [u, const([1, HKV, g, sk, HEAD], np.int64)])
        return node("Reshape", [e, const([1, HQ, sk, HEAD], np.int64)])

    h = rms("x", "input_layernorm.weight")
    q = rope(heads(linear(h, "self_attn.q_proj.weight"), HQ))
    k = rope(heads(linear(h, "self_attn.k_proj.weight"), HKV))
    v = heads(linear(h, "self_attn.v_proj.weight"), HKV)
    sk = S
    if decode:
        k = node("Concat", ["k_cache", k], axis=2)
        v = node("Concat", ["v_cache", v], axis=2)
        sk = CACHE + 1
    k, v = expand_kv(k, sk), expand_kv(v, sk)
    s = node("MatMul", [q, node("Transpose", [k], perm=[0, 1, 3, 2])])
    s = node("Mul", [s, const(1 / np.sqrt(HEAD))])
    if not decode:  # causal: query i sees keys j <= i (decode: the one query sees every key)
        s = node("Add", [s, const(np.triu(np.full((S, S), -np.inf, dtype=f32), 1))])
    o = node("MatMul", [node("Softmax", [s], axis=-1), v])
    o = node("Reshape", [node("Transpose", [o], perm=[0, 2, 1, 3]), const([1, S, D_MODEL], np.int64)])
    r1 = node("Add", ["x", linear(o, "self_attn.o_proj.weight")])
    h2 = rms(r1, "post_attention_layernorm.weight")
    g = linear(h2, "mlp.gate_proj.weight")
    act = node("Mul", [g, node("Sigmoid", [g])])
    ff = linear(node("Mul", [act, linear(h2, "mlp.up_proj.weight")]), "mlp.down_proj.weight")
    node("Add", [r1, ff])
    extra = ["--input", f"pos=i32={CACHE}"] if decode else []
    return model(inputs, "y", [1, S, D_MODEL]), W, X, extra


# ---------------------------------------------------------------- runners
def ensure_ort(ort_dir):
    mod = os.path.join(ort_dir, "node_modules", "onnxruntime-node")
    if os.path.isdir(mod):
        return
    if not shutil.which("npm"):
        raise SystemExit("compare_ort: npm is not installed (Debian: apt-get install npm)")
    os.makedirs(ort_dir, exist_ok=True)
    print(f"compare_ort: installing onnxruntime-node {ORT_VERSION} into {ort_dir}", file=sys.stderr)
    r = subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund", "--prefix", ort_dir,
                        f"onnxruntime-node@{ORT_VERSION}"], capture_output=True, text=True)
    if r.returncode != 0 or not os.path.isdir(mod):
        raise SystemExit(f"compare_ort: npm install onnxruntime-node failed:\n{r.stderr[-2000:]}")


def run_ort(a, model, in_dir, out_dir):
    """ORT timed twice, with its pool threads spinning (default) and sleeping; the faster counts."""
    best = None
    for spin in ("1", "0"):
        r = subprocess.run(["node", os.path.join(HERE, "ort_time.cjs"), a.ort_dir, model, in_dir, str(a.threads),
                            str(a.warmup), str(a.reps), out_dir, spin], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"compare_ort: ONNX Runtime failed on {model}:\n{r.stderr[-2000:]}")
        res = json.loads(r.stdout.strip().splitlines()[-1])
        res["spin"] = spin
        if best is None or res["median_ms"] < best["median_ms"]:
            best = res
    return best


def rlx_cmd(a, sub, target, params, in_dir, input_names, extra):
    c = [a.rlx, sub, target]
    if params:
        c += ["--params", params]
    for n in input_names:
        c += ["--input", f"{n}=@{os.path.join(in_dir, n + '.npy')}"]
    return c + [s for s in extra]


def run_rlx(a, cmd, env):
    r = subprocess.run(cmd + ["--modes", "compiled", "--warmup", str(a.warmup), "--reps", str(a.reps),
                              "--format", "json"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        hint = ""
        if cmd[2].endswith(".onnx"):
            hint = "\n(rlx runs .onnx files only with ONNX import, the `onnx` branch; else pass --graph GRAPH.json)"
        raise SystemExit(f"compare_ort: rlx bench failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}{hint}")
    rows = [row for row in json.loads(r.stdout)["rows"] if row["backend"] == "cpu" and row["mode"] == "compiled"]
    return rows[0]


def value_check(a, cmd, out_id, ort_out, env):
    """Max abs difference between rlx's compiled output (written with -o) and ORT's, the ORT
    values taken in rlx's output shape (a model with dynamic axes declares no static shape)."""
    out = os.path.join(os.path.dirname(ort_out), "rlx_" + os.path.basename(ort_out))
    c = cmd[:]
    c[1] = "run"
    c += ["--mode", "compiled", "-o", f"{out_id}={out}"]
    r = subprocess.run(c, capture_output=True, text=True, env=env)
    try:
        got = np.load(out)
        want = np.load(ort_out)
        if want.size != got.size:
            return float("nan")
        return float(np.max(np.abs(got.astype(np.float64) - want.reshape(got.shape).astype(np.float64))))
    except Exception:
        return float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", default="matmul_2048,gelu_chain,decoder_block,decode_step")
    p.add_argument("--onnx", help="your own model (see above)")
    p.add_argument("--graph", help="the rlx JSON graph computing the same as --onnx")
    p.add_argument("--params", help="rlx --params file for --graph")
    p.add_argument("--inputs", help="directory of <input>.npy for --onnx")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=int(os.environ.get("RLX_NUM_THREADS", "2")))
    p.add_argument("--rlx", default=os.path.join(ROOT, "build", "apps", "rlx", "rlx"))
    p.add_argument("--ort-dir", default=os.environ.get("RLX_ORT_DIR", os.path.expanduser("~/.cache/rlx/onnxruntime-node")))
    p.add_argument("--keep", help="keep the generated models and data in this directory")
    p.add_argument("--also-plain", action="store_true",
                   help="also time rlx with RLX_CPU_PLAIN_PLAN=1 in every round (compiled plans without prepacked "
                        "weights and epilogue fusion), to show what those give")
    p.add_argument("--bandwidth-bin", default=os.path.join(ROOT, "build", "bench", "gemm_candidates"),
                   help="for decode_step: the streaming-read benchmark run in every round (gemm_candidates "
                        "bandwidth); the decode step's weight bytes / its time is compared with it")
    a = p.parse_args()
    if not os.access(a.rlx, os.X_OK):
        raise SystemExit(f"compare_ort: {a.rlx} not found: build first (scripts/build.sh)")
    ensure_ort(a.ort_dir)
    env = dict(os.environ, RLX_NUM_THREADS=str(a.threads))
    work = a.keep or tempfile.mkdtemp(prefix="rlx-ort-")
    os.makedirs(work, exist_ok=True)

    cases = []  # (name, model, rlx target, params, in_dir, input names, extra, out id)
    weight_bytes = {}
    if a.onnx:
        if not a.inputs:
            raise SystemExit("compare_ort: --onnx needs --inputs DIR (<input>.npy per model input)")
        import onnx
        m = onnx.load(a.onnx, load_external_data=False)
        init = {i.name for i in m.graph.initializer}
        names = [i.name for i in m.graph.input if i.name not in init]
        target = a.graph or a.onnx
        out_id = json.load(open(a.graph))["outputs"][0] if a.graph else m.graph.output[0].name
        label = os.path.basename(a.onnx)
        if label == "model.onnx":  # name it by its folder (bench/onnx_models.py writes DIR/NAME/model.onnx)
            label = os.path.basename(os.path.dirname(os.path.abspath(a.onnx))) + ".onnx"
        cases.append((label, a.onnx, target, a.params, a.inputs, names, [], out_id,
                      m.graph.output[0].name))
    else:
        for gi, name in enumerate(a.graphs.split(",")):
            rng = np.random.default_rng(4321 + gi)
            model, W, X, extra = make_case(name, rng)
            import onnx
            mpath = os.path.join(work, name + ".onnx")
            onnx.save(model, mpath)
            params = None
            if W:
                params = os.path.join(work, name + ".weights.safetensors")
                write_safetensors(params, W)
            in_dir = os.path.join(work, name + ".inputs")
            os.makedirs(in_dir, exist_ok=True)
            for k, v in X.items():
                np.save(os.path.join(in_dir, k + ".npy"), v)
            graph = os.path.join(HERE, "graphs", name + ".json")
            rlx_inputs = [k for k in X if not any(s.startswith(k + "=") for s in extra)]
            cases.append((name, mpath, graph, params, in_dir, rlx_inputs, extra,
                          json.load(open(graph))["outputs"][0], "y"))
            weight_bytes[name] = sum(v.nbytes for v in W.values())

    print(f"threads {a.threads}; data in {work}", file=sys.stderr)
    table = []
    bandwidth = []
    plain_rounds = {}
    for name, model, target, params, in_dir, names, extra, out_id, ort_out_name in cases:
        cmd = rlx_cmd(a, "bench", target, params, in_dir, names, extra)
        rounds, version = [], "?"
        bw_rounds = []
        for r in range(a.rounds):
            row = run_rlx(a, cmd, env)
            if a.also_plain:
                plain = run_rlx(a, cmd, dict(env, RLX_CPU_PLAIN_PLAN="1"))
                plain_rounds.setdefault(name, []).append((plain["median_ms"], row["median_ms"],
                                                          plain.get("min_ms", 0), row.get("min_ms", 0)))
                print(f"{name} round {r + 1}: rlx compiled without packing/epilogues {plain['median_ms']:.3f} ms",
                      file=sys.stderr)
            ort = run_ort(a, model, in_dir, os.path.join(work, name + ".ort_out"))
            version = ort["version"]
            rounds.append((row["median_ms"], ort["median_ms"], os.getloadavg()[0], row.get("min_ms", row["median_ms"]),
                           ort.get("min_ms", ort["median_ms"])))
            print(f"{name} round {r + 1}: rlx compiled {row['median_ms']:.3f} ms, ORT {ort['median_ms']:.3f} ms "
                  f"(spinning {'on' if ort['spin'] == '1' else 'off'})",
                  file=sys.stderr)
            if name == "decode_step" and weight_bytes.get(name):
                bw = run_bandwidth(a, env)
                if bw:
                    bw_rounds.append((row["median_ms"], row.get("min_ms", row["median_ms"]), bw))
        if bw_rounds:
            bandwidth.append((name, weight_bytes[name], bw_rounds))
        raw = os.path.join(work, name + ".ort_out", ort_out_name + ".f32")
        ort_npy = os.path.join(work, name + ".ort_y.npy")
        y = np.fromfile(raw, dtype="<f4")
        np.save(ort_npy, y)  # flat; reshape_like gives it the model's output shape when known
        diff = value_check(a, rlx_cmd(a, "bench", target, params, in_dir, names, extra), out_id,
                           reshape_like(ort_npy, y, model, ort_out_name), env)
        ratio = statistics.median(r[0] / r[1] for r in rounds)
        worst = max(r[0] / r[1] for r in rounds)
        table.append((name, statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds), ratio,
                      worst, diff, [round(r[2], 1) for r in rounds], min(r[3] for r in rounds), min(r[4] for r in rounds)))

    print(f"\nrlx (compiled, CPU) vs ONNX Runtime {version} (onnxruntime-node, CPU provider), {a.threads} threads, "
          f"{a.rounds} rounds x {a.reps} reps; ratio = rlx / ORT per round, median (< 1: rlx faster)\n")
    print("| graph | rlx compiled ms (median) | ORT ms (median) | ratio rlx/ORT | worst round | rlx min ms | ORT min ms "
          "| ratio of mins | max abs diff | load per round |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, rm, om, ratio, worst, diff, loads, rmin, omin in table:
        print(f"| {name} | {rm:.3f} | {om:.3f} | {ratio:.2f} | {worst:.2f} | {rmin:.3f} | {omin:.3f} | {rmin / omin:.2f} "
              f"| {diff:.2e} | {loads} |")
    if plain_rounds:
        print("\nrlx compiled plans with and without prepacked weights and epilogue fusion (RLX_CPU_PLAIN_PLAN=1), "
              "same rounds\n")
        print("| graph | plain ms (median) | packed+fused ms (median) | speed-up (median of rounds) | plain min ms "
              "| packed+fused min ms |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, rs in plain_rounds.items():
            print(f"| {name} | {statistics.median(r[0] for r in rs):.3f} | {statistics.median(r[1] for r in rs):.3f} "
                  f"| {statistics.median(r[0] / r[1] for r in rs):.2f}x | {min(r[2] for r in rs):.3f} "
                  f"| {min(r[3] for r in rs):.3f} |")
    for name, wb, rs in bandwidth:
        # per round: the step's weight bytes over its time, against the streaming reads of that round
        med = statistics.median(wb / r[0] * 1e-6 for r in rs)
        best = max(wb / r[1] * 1e-6 for r in rs)
        rw = statistics.median(r[2]["read_weights"] for r in rs)
        rg = statistics.median(r[2]["read_1gib"] for r in rs)
        frac_w = statistics.median((wb / r[0] * 1e-6) / r[2]["read_weights"] for r in rs)
        frac_g = statistics.median((wb / r[0] * 1e-6) / r[2]["read_1gib"] for r in rs)
        print(f"\n{name}: {wb / 1e6:.1f} MB of weights read at {med:.1f} GB/s (median; best {best:.1f}); streaming "
              f"read in the same rounds: {rw:.1f} GB/s over the same {wb / 1e6:.0f} MB, {rg:.1f} GB/s over 1 GiB; "
              f"the step reaches {100 * frac_w:.0f}% of the first and {100 * frac_g:.0f}% of the second "
              f"(medians of per-round ratios; the step also reads its KV cache and activations)")


def run_bandwidth(a, env):
    """GB/s of the streaming reads of `gemm_candidates bandwidth` (medians of its reps), or None."""
    if not os.access(a.bandwidth_bin, os.X_OK):
        print(f"compare_ort: {a.bandwidth_bin} not built: no bandwidth figure", file=sys.stderr)
        return None
    r = subprocess.run([a.bandwidth_bin, "bandwidth", str(max(a.reps, 5))], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print(f"compare_ort: bandwidth benchmark failed: {r.stderr[-500:]}", file=sys.stderr)
        return None
    out = {}
    for line in r.stdout.splitlines():
        f = line.split()
        if line.startswith("read_"):
            out[f[0]] = float(f[5])
    return out if "read_weights" in out and "read_1gib" in out else None


def reshape_like(path, y, model, out_name):
    import onnx
    m = onnx.load(model, load_external_data=False)
    for o in m.graph.output:
        if o.name == out_name:
            dims = [d.dim_value for d in o.type.tensor_type.shape.dim]
            if dims and all(d > 0 for d in dims) and int(np.prod(dims)) == y.size:
                np.save(path, y.reshape(dims))
    return path


if __name__ == "__main__":
    main()
