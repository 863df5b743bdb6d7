#!/usr/bin/env python3
"""rlx vs PyTorch (eager, CPU) on the standard benchmark graphs, with the same
weights, the same inputs and the same thread count, plus the hardware floors.

For each graph, in rounds (rlx then PyTorch, back to back, so that drift in the
machine's load hits both):
  * rlx: `rlx bench GRAPH --format json` (every mode), weights and inputs from
    safetensors files written here with seeded numpy values;
  * PyTorch: the same computation written as ordinary eager PyTorch code
    (torch.inference_mode, torch.set_num_threads(N));
  * floors: bench/raw_floor measures raw OpenBLAS sgemm at 2048 and a STREAM-like
    copy of the GELU chain's bytes (65.5 MB read + 65.5 MB written).
Each timing is the median over --reps runs; the table shows the best round's
(the least disturbed by other load). Ratios (rlx / PyTorch, rlx / floor) are taken
within each round, from measurements seconds apart, and the median over the rounds
is reported. Outputs are checked once: rlx's compiled output against PyTorch's
(max abs difference is reported).

    python3 bench/compare_torch.py                         # everything, markdown table
    python3 bench/compare_torch.py --graphs gelu_chain --rounds 3 --json out.json
Environment: RLX_NUM_THREADS (default nproc) sets the thread count of both sides.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import graphlib as gl  # noqa: E402  (scripts/graphlib.py: the project's safetensors writer)
GRAPHS = ["matmul_1024", "matmul_2048", "gelu_chain", "decoder_block", "decode_step"]
D_MODEL, HQ, HKV, HEAD, FFN, SEQ, CACHE, EPS = 1024, 16, 4, 64, 2816, 256, 256, 1e-5


# ---------------------------------------------------------------- safetensors
def write_safetensors(path, tensors):
    """{name: float32/int32/int64 array} -> a safetensors file, by the project's own writer."""
    names = {np.dtype(np.float32): "f32", np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}
    data = gl.encode_safetensors({k: (np.asarray(a), names[np.asarray(a).dtype]) for k, a in tensors.items()})
    with open(path, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- data
def block_weights(rng):
    def lin(o, i):
        return (rng.standard_normal((o, i), dtype=np.float32) / np.sqrt(i)).astype(np.float32)

    return {
        "input_layernorm.weight": (1 + 0.1 * rng.standard_normal(D_MODEL)).astype(np.float32),
        "self_attn.q_proj.weight": lin(HQ * HEAD, D_MODEL),
        "self_attn.k_proj.weight": lin(HKV * HEAD, D_MODEL),
        "self_attn.v_proj.weight": lin(HKV * HEAD, D_MODEL),
        "self_attn.o_proj.weight": lin(D_MODEL, HQ * HEAD),
        "post_attention_layernorm.weight": (1 + 0.1 * rng.standard_normal(D_MODEL)).astype(np.float32),
        "mlp.gate_proj.weight": lin(FFN, D_MODEL),
        "mlp.up_proj.weight": lin(FFN, D_MODEL),
        "mlp.down_proj.weight": lin(D_MODEL, FFN),
    }


def make_case(name, rng):
    """(weights, inputs as arrays, extra rlx --input specs)."""
    f32 = np.float32
    if name.startswith("matmul_"):
        n = int(name.split("_")[1])
        return {}, {"a": rng.standard_normal((n, n), dtype=f32), "b": rng.standard_normal((n, n), dtype=f32)}, []
    if name == "gelu_chain":
        return {}, {"x": rng.standard_normal((4, 1000, 4096), dtype=f32)}, []
    if name == "decoder_block":
        return block_weights(rng), {"x": rng.standard_normal((1, SEQ, D_MODEL), dtype=f32)}, []
    if name == "decode_step":
        return block_weights(rng), {
            "x": rng.standard_normal((1, 1, D_MODEL), dtype=f32),
            "k_cache": rng.standard_normal((1, HKV, CACHE, HEAD), dtype=f32),
            "v_cache": rng.standard_normal((1, HKV, CACHE, HEAD), dtype=f32),
        }, [f"pos=i32={CACHE}"]
    raise SystemExit(f"unknown graph {name}")


# ---------------------------------------------------------------- PyTorch versions
def torch_fn(name, torch, W, X):
    """A zero-argument callable computing the graph's output with eager PyTorch."""
    t = {k: torch.from_numpy(v) for k, v in X.items()}
    w = {k: torch.from_numpy(v) for k, v in W.items()}
    if name.startswith("matmul_"):
        a, b = t["a"], t["b"]
        return lambda: a @ b
    if name == "gelu_chain":
        x = t["x"]
        return lambda: ((torch.erf(x * 0.7071067811865476) + 1.0) * x) * 0.5

    F = torch.nn.functional
    decode = name == "decode_step"
    S = 1 if decode else SEQ
    pos0 = CACHE if decode else 0

    # RoPE tables are precomputed, as transformer implementations cache them.
    inv = 1.0 / (10000.0 ** (torch.arange(0, HEAD, 2, dtype=torch.float64) / HEAD))
    ang = torch.arange(pos0, pos0 + S, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1).float()
    sin = torch.cat([ang.sin(), ang.sin()], -1).float()

    def rope(v):
        h = HEAD // 2
        rot = torch.cat([-v[..., h:], v[..., :h]], -1)
        return v * cos + rot * sin

    def rms(v, g):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + EPS) * g

    causal = torch.full((S, S), float("-inf")).triu(1) if not decode else None
    x = t["x"]
    kc, vc = (t["k_cache"], t["v_cache"]) if decode else (None, None)

    def block():
        h = rms(x, w["input_layernorm.weight"])
        q = F.linear(h, w["self_attn.q_proj.weight"]).view(1, S, HQ, HEAD).transpose(1, 2)
        k = F.linear(h, w["self_attn.k_proj.weight"]).view(1, S, HKV, HEAD).transpose(1, 2)
        v = F.linear(h, w["self_attn.v_proj.weight"]).view(1, S, HKV, HEAD).transpose(1, 2)
        q, k = rope(q), rope(k)
        if decode:
            k = torch.cat([kc, k], 2)
            v = torch.cat([vc, v], 2)
        k = k.repeat_interleave(HQ // HKV, dim=1)
        v = v.repeat_interleave(HQ // HKV, dim=1)
        s = (q @ k.transpose(-1, -2)) * (1.0 / HEAD ** 0.5)
        if causal is not None:
            s = s + causal
        a = torch.softmax(s, -1) @ v
        a = a.transpose(1, 2).reshape(1, S, HQ * HEAD)
        r = x + F.linear(a, w["self_attn.o_proj.weight"])
        m = rms(r, w["post_attention_layernorm.weight"])
        g = F.silu(F.linear(m, w["mlp.gate_proj.weight"])) * F.linear(m, w["mlp.up_proj.weight"])
        return r + F.linear(g, w["mlp.down_proj.weight"])

    return block


def time_torch(fn, torch, warmup, reps):
    with torch.inference_mode():
        for _ in range(warmup + 1):
            fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ts)), fn


# ---------------------------------------------------------------- rlx side
def rlx_args(rlx, graph, wfile, ifile, X, extra):
    a = [rlx, "bench", graph]
    if wfile:
        a += ["--params", wfile]
    for k in X:
        a += ["--input", f"{k}={ifile}:{k}"]
    for s in extra:
        a += ["--input", s]
    return a


def run_rlx_bench(args, modes, warmup, reps, env):
    r = subprocess.run(args + ["--modes", modes, "--warmup", str(warmup), "--reps", str(reps), "--format", "json"],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"rlx bench failed ({r.returncode}): {' '.join(args)}\n{r.stderr}")
    return {row["mode"]: row for row in json.loads(r.stdout)["rows"] if row["backend"] == "cpu"}


def check_against_torch(args, out_npy, env):
    a = args[:]
    a[1] = "run"
    out_id = json.load(open(a[2]))["outputs"][0]
    r = subprocess.run(a + ["--mode", "compiled", "--json", "--expect", f"{out_id}=@{out_npy}", "--atol", "1e9"],
                       capture_output=True, text=True, env=env)
    try:
        return json.loads(r.stdout)["expect"][0]["max_abs"]
    except Exception:
        return float("nan")


def run_floor(raw, threads, reps, env):
    r = subprocess.run([raw, "--sgemm", "2048", "--copy-bytes", str(4 * 1000 * 4096 * 4 * 2), "--reps", str(reps),
                        "--threads", str(threads)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"raw_floor failed: {r.stderr}")
    return json.loads(r.stdout)


def torch_worker(name, data, threads, warmup, reps, out_npy):
    """Child process: times one graph in PyTorch (its OpenMP settings come from the environment)."""
    import torch
    torch.set_num_threads(threads)
    z = np.load(data)
    W = {k[2:]: z[k] for k in z.files if k.startswith("w:")}
    X = {k[2:]: z[k] for k in z.files if k.startswith("x:")}
    fn = torch_fn(name, torch, W, X)
    ms, _ = time_torch(fn, torch, warmup, reps)
    if out_npy:
        with torch.inference_mode():
            np.save(out_npy, fn().numpy())
    print(json.dumps({"median_ms": ms, "threads": torch.get_num_threads(), "version": torch.__version__}))


# PyTorch runs with OpenMP's default (threads spin while waiting: fastest on an idle
# machine) and with OMP_WAIT_POLICY=PASSIVE (much faster when other work shares the
# CPUs); the table compares rlx with the faster of the two.
TORCH_POLICIES = {"default": {}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"}}


def run_torch(name, data, threads, warmup, reps, policy, out_npy=None):
    env = dict(os.environ, **TORCH_POLICIES[policy])
    env.pop("OMP_NUM_THREADS", None)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-worker", name, "--data", data,
                        "--threads", str(threads), "--warmup", str(warmup), "--reps", str(reps)] +
                       (["--ref-out", out_npy] if out_npy else []), capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"PyTorch worker failed for {name}: {r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", default=os.path.join(ROOT, "build-bench/apps/rlx/rlx"))
    ap.add_argument("--raw", default=os.path.join(ROOT, "build-bench/bench/raw_floor"))
    ap.add_argument("--graphs", default=",".join(GRAPHS))
    ap.add_argument("--modes", default="eager,lazy,compiled")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="rlx/PyTorch alternations per graph (best median kept)")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("RLX_NUM_THREADS", 0)) or os.cpu_count())
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--keep", help="keep the generated weights/inputs in this directory")
    ap.add_argument("--torch-worker", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--ref-out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        return torch_worker(a.torch_worker, a.data, a.threads, a.warmup, a.reps, a.ref_out)

    env = dict(os.environ, RLX_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    modes = a.modes.split(",")
    work = a.keep or tempfile.mkdtemp(prefix="rlx-bench-")
    os.makedirs(work, exist_ok=True)
    print(f"threads: {a.threads} (rlx: RLX_NUM_THREADS, OPENBLAS_NUM_THREADS; PyTorch: torch.set_num_threads); "
          f"data in {work}", file=sys.stderr)

    results, floors, loads = {}, [], [os.getloadavg()[0]]
    for gi, name in enumerate(a.graphs.split(",")):
        rng = np.random.default_rng(1234 + gi)
        W, X, extra = make_case(name, rng)
        wfile = os.path.join(work, f"{name}.weights.safetensors") if W else None
        ifile = os.path.join(work, f"{name}.inputs.safetensors")
        if W:
            write_safetensors(wfile, W)
        write_safetensors(ifile, X)
        data = os.path.join(work, f"{name}.npz")
        np.savez(data, **{f"w:{k}": v for k, v in W.items()}, **{f"x:{k}": v for k, v in X.items()})
        graph = os.path.join(HERE, "graphs", name + ".json")
        args = rlx_args(a.rlx, graph, wfile, ifile, X, extra)
        best = {"torch_ms": float("inf"), "torch_policy_ms": {}, "rlx": {}, "rounds": []}
        for rnd in range(a.rounds):
            # rlx, then the floors right after it, then PyTorch: each round's ratios pair
            # measurements taken a few seconds apart.
            rows = run_rlx_bench(args, a.modes, a.warmup, a.reps, env)
            fl = run_floor(a.raw, a.threads, a.reps, env) if name != "matmul_1024" else None
            tms = {}
            for pol in TORCH_POLICIES:
                t = run_torch(name, data, a.threads, a.warmup, a.reps, pol)
                tms[pol] = t["median_ms"]
                best["torch_policy_ms"][pol] = min(best["torch_policy_ms"].get(pol, float("inf")), tms[pol])
                best["torch_version"] = t["version"]
            tm = min(tms.values())
            best["torch_ms"] = min(best["torch_ms"], tm)
            for m, row in rows.items():
                if m not in best["rlx"] or row["median_ms"] < best["rlx"][m]["median_ms"]:
                    best["rlx"][m] = row
            loads.append(os.getloadavg()[0])
            best["rounds"].append({"rlx": {m: row["median_ms"] for m, row in rows.items()}, "torch_ms": tm,
                                   "torch": tms, "floor": fl, "load": loads[-1]})
            if fl:
                floors.append(fl)
            print(f"  {name} round {rnd + 1} (load {loads[-1]:.2f}): torch " +
                  ", ".join(f"{p} {v:.3f} ms" for p, v in tms.items()) + "; rlx " +
                  ", ".join(f"{m} {rows[m]['median_ms']:.3f} ms" for m in modes if m in rows), file=sys.stderr)
        out_npy = os.path.join(work, f"{name}.torch_out.npy")
        run_torch(name, data, a.threads, 0, 1, "passive", out_npy)
        ref = np.load(out_npy)
        best["max_abs_vs_torch"] = check_against_torch(args, out_npy, env)
        best["max_abs_ref"] = float(np.abs(ref).max())
        results[name] = best

    def paired(name, mode, f):
        """Median, min and max over the rounds of f(round, rlx ms of `mode`)."""
        v = sorted(f(r, r["rlx"][mode]) for r in results[name]["rounds"] if mode in r["rlx"])
        return (float(np.median(v)), v[0], v[-1]) if v else (float("nan"),) * 3

    def fmt3(t, spec=".2f", unit=""):
        return f"{t[0]:{spec}}{unit} (rounds {t[1]:{spec}}-{t[2]:{spec}})"

    # ---- table ----
    print(f"\nthreads: {a.threads}; times: the median of {a.reps} runs, best of {a.rounds} rounds; ratio = rlx / "
          f"PyTorch within each round, median over the rounds (lower is better); 1-minute load average "
          f"{min(loads):.2f}-{max(loads):.2f} on {os.cpu_count()} CPUs\n")
    print("| graph | PyTorch ms (default / passive OpenMP) | " + " | ".join(f"rlx {m} ms | ratio" for m in modes) +
          " | max abs diff vs PyTorch |")
    print("|---|---:|" + "---:|---:|" * len(modes) + "---:|")
    for name, r in results.items():
        cells = []
        for m in modes:
            row = r["rlx"].get(m)
            ratio = paired(name, m, lambda rd, x: x / rd["torch_ms"])[0]
            cells += [f"{row['median_ms']:.2f}", f"{ratio:.3f}"] if row else ["-", "-"]
        pol = r["torch_policy_ms"]
        print(f"| {name} | **{r['torch_ms']:.2f}** ({pol['default']:.2f} / {pol['passive']:.2f}) | " + " | ".join(cells) +
              f" | {r['max_abs_vs_torch']:.2e} |")
    print()
    floor = {}
    if floors:
        floor = {
            "sgemm_2048_ms": min(f["sgemm"]["median_ms"] for f in floors),
            "copy_gbps": max(f["copy"]["best_gbps"] for f in floors),
            "gelu_floor_ms": min(f["copy"]["floor_ms"] for f in floors),
            "decoder_sgemm_ms": min(f["decoder_linears"]["sgemm_seq256_ms"] for f in floors),
            "decode_sgemv_ms": min(f["decoder_linears"]["sgemv_seq1_ms"] for f in floors),
            "decode_weight_bytes": floors[0]["decoder_linears"]["weight_bytes"],
        }
    summary = {}
    if "matmul_2048" in results:
        print(f"matmul_2048 vs raw OpenBLAS sgemm 2048 (best {floor['sgemm_2048_ms']:.2f} ms), as % of raw sgemm "
              f"throughput, paired per round:")
        for m in results["matmul_2048"]["rlx"]:
            t = paired("matmul_2048", m, lambda rd, x: 100 * rd["floor"]["sgemm"]["median_ms"] / x)
            summary[f"matmul_2048_{m}_pct_of_sgemm"] = t
            print(f"  {m}: {fmt3(t, '.1f', '%')}")
    if "gelu_chain" in results:
        g = results["gelu_chain"]
        print(f"GELU chain memory floor (65.5 MB read + 65.5 MB written at the best copy bandwidth, "
              f"{floor['copy_gbps']:.2f} GB/s at best): {floor['gelu_floor_ms']:.2f} ms at best; paired per round:")
        for m in g["rlx"]:
            t = paired("gelu_chain", m, lambda rd, x: x / rd["floor"]["copy"]["floor_ms"])
            sp = paired("gelu_chain", m, lambda rd, x: rd["torch_ms"] / x)
            summary[f"gelu_{m}_x_floor"] = t
            summary[f"gelu_{m}_speedup_vs_torch"] = sp
            print(f"  {m}: {fmt3(t, '.2f', 'x')} the floor; {fmt3(sp, '.1f', 'x')} faster than PyTorch")
        if {"eager", "compiled"} <= set(g["rlx"]):
            t = paired("gelu_chain", "compiled", lambda rd, x: rd["rlx"]["eager"] / x)
            summary["gelu_compiled_speedup_vs_eager"] = t
            print(f"  compiled vs rlx eager: {fmt3(t, '.2f', 'x')} faster")
    if "decoder_block" in results:
        r = results["decoder_block"]
        print(f"decoder block BLAS floor (its 7 linear layers as raw cblas_sgemm calls): {floor['decoder_sgemm_ms']:.2f} ms "
              f"at best; paired per round:")
        t = paired("decoder_block", next(iter(r["rlx"])), lambda rd, x: rd["torch_ms"] / rd["floor"]["decoder_linears"]["sgemm_seq256_ms"])
        print(f"  PyTorch: {fmt3(t, '.2f', 'x')} the floor (so 0.5x PyTorch is {t[0] / 2:.2f}x the floor)")
        for m in r["rlx"]:
            t = paired("decoder_block", m, lambda rd, x: x / rd["floor"]["decoder_linears"]["sgemm_seq256_ms"])
            summary[f"decoder_{m}_x_blas_floor"] = t
            print(f"  {m}: {fmt3(t, '.2f', 'x')} the floor")
        if {"lazy", "compiled"} <= set(r["rlx"]):
            t = paired("decoder_block", "compiled", lambda rd, x: x / rd["rlx"]["lazy"])
            summary["decoder_compiled_over_lazy"] = t
            d = r["rlx"]
            print(f"  compiled / lazy time: {fmt3(t, '.3f')}; plan peak memory: eager "
                  f"{d.get('eager', {}).get('plan_peak_mib', 0):.1f} MiB, lazy {d['lazy']['plan_peak_mib']:.1f} MiB, "
                  f"compiled {d['compiled']['plan_peak_mib']:.1f} MiB")
    if "decode_step" in results:
        r = results["decode_step"]
        bw = floor["decode_weight_bytes"] / (floor["copy_gbps"] * 1e9) * 1e3
        print(f"decode step: 7 raw cblas_sgemv calls {floor['decode_sgemv_ms']:.2f} ms at best (weights warm in "
              f"cache); its {floor['decode_weight_bytes'] / 1e6:.1f} MB of weights at the best copy bandwidth: "
              f"{bw:.2f} ms; paired per round:")
        for m in r["rlx"]:
            t = paired("decode_step", m, lambda rd, x: x / rd["floor"]["decoder_linears"]["sgemv_seq1_ms"])
            print(f"  {m}: {fmt3(t, '.2f', 'x')} the sgemv floor")

    if a.json:
        with open(a.json, "w") as f:
            json.dump({"threads": a.threads, "torch": next(iter(results.values()), {}).get("torch_version"),
                       "reps": a.reps, "rounds": a.rounds, "loadavg": loads, "floors": floor, "summary": summary,
                       "graphs": results}, f, indent=2)
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
