#!/usr/bin/python3
"""Issues 30 and 31 on the lent GPU (the device tool; see scripts/device_run.sh): rlx's Vulkan
executor against PyTorch eager on CUDA, both in one process's call, on the same models.

  vision    ResNet-50 and ViT-S/16 (torchvision's VisionTransformer: patch 16, 12 layers, 6 heads,
            dim 384, MLP 1536, i.e. DeiT-S's shape; torchvision has no vit_s_16 builder) at batch 32,
            seeded random weights with realistic BatchNorm statistics (bench/zoo.py's build), exported
            with torch.onnx (TorchScript exporter, opset 17). rlx: `rlx bench MODEL --backends vulkan
            --modes compiled` in f32 and with --dtype f16; its output checked against PyTorch's CPU f32
            forward pass (and ONNX Runtime's CPU run). PyTorch eager on CUDA, input already on the GPU,
            torch.cuda events, median of --reps after warm-up: f32 (cuDNN's default TF32 for
            convolutions, matmul TF32 off: PyTorch's defaults), f32 with TF32 off everywhere, f16 (model
            and input .half()), autocast f16, and channels_last for the f16 ResNet-50.
  generate  bench/generate_bench.py's 'large' decoder (d 2048, 2 layers, 16 heads, FFN 5632, vocab
            4096, merged export): `rlx generate -b vulkan -m compiled --json` against PyTorch's greedy
            loop with a KV cache on CUDA over the same module (f32, then f16), tokens/s from the
            median step after the prompt; the ids compared.
  detectors tests/onnx/detectors.py --all on Vulkan, with ONNX Runtime's Python package as the
            reference (the device machine has no node).

  bench/gpu_targets.py --rlx RLX [--work DIR] [--out DIR] [--reps 20] vision|generate|detectors ...
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "onnx"))


def legacy_export():
    """torch >= 2.9 exports through dynamo by default; the models here were written for the
    TorchScript exporter (torch 1.13 here), which 2.x still has behind dynamo=False."""
    import inspect
    import torch
    orig = torch.onnx.export
    if getattr(orig, "_rlx_legacy", False) or "dynamo" not in inspect.signature(orig).parameters:
        return

    def export(*a, **k):
        k.setdefault("dynamo", False)
        return orig(*a, **k)
    export._rlx_legacy = True
    torch.onnx.export = export


def log(*a):
    print(*a, flush=True)


def rlx_bench(a, model, extra, reps):
    cmd = [a.rlx, "bench", model, "--backends", "vulkan", "--modes", "compiled", "--reps", str(reps), "--format", "json"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-600:] or f"exit {r.returncode}"}
    return json.loads(r.stdout)["rows"][0]


def dist(got, ref):
    g, r = got.astype(np.float64).reshape(ref.shape), ref.astype(np.float64)
    return float(np.abs(g - r).max() / max(1e-6, np.abs(r).max()))


def torch_time(fn, reps, warm=5):
    import torch
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


# --------------------------------------------------------------------------- vision
def vision(a):
    import torch
    import zoo
    legacy_export()
    B = a.batch
    res = []
    for name in a.models.split(","):
        spec = next(m for m in zoo.zoo() if m["name"] == name)
        d = os.path.join(a.work, name)
        os.makedirs(d, exist_ok=True)
        m, _ = zoo.build(spec, 224, 0)
        g = torch.Generator().manual_seed(5)
        x = torch.randn(B, 3, 224, 224, generator=g)
        path = os.path.join(d, "model.onnx")
        t0 = time.time()
        torch.onnx.export(m, (x,), path, input_names=["image"], output_names=["output"], opset_version=17,
                          do_constant_folding=True)
        with torch.no_grad():
            ref = m(x).numpy()
        np.save(os.path.join(d, "x.npy"), x.numpy())
        log(f"{name}: exported batch {B} ({time.time() - t0:.1f} s, {os.path.getsize(path) / 1e6:.0f} MB)")
        try:
            import onnxruntime as ort
            so = ort.SessionOptions()
            o = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, {"image": x.numpy()})[0]
            log(f"  ONNX Runtime {ort.__version__} (CPU) against PyTorch CPU f32: {dist(o, ref):.2e}")
        except Exception as e:  # noqa: BLE001
            log(f"  ONNX Runtime: {e}")
        # correctness of rlx on the GPU, f32 and f16
        for dt in ("f32", "f16"):
            od = os.path.join(d, f"rlx.{dt}")
            cmd = [a.rlx, "run", path, "-b", "vulkan", "-m", "compiled", "-i", f"image=@{d}/x.npy", "--out-dir", od]
            if dt == "f16":
                cmd += ["--dtype", "f16"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                log(f"  rlx run vulkan {dt}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
                continue
            got = np.load(os.path.join(od, "output.npy"))
            top1 = float((got.reshape(ref.shape).argmax(1) == ref.argmax(1)).mean())
            log(f"  rlx vulkan compiled {dt}: max|rlx - torch| / max|torch| = {dist(got, ref):.2e}, top-1 agreement {top1:.3f}")
        # rlx timing
        row = {"model": name, "batch": B}
        for dt in ("f32", "f16"):
            rb = rlx_bench(a, path, ["--input", f"image=@{d}/x.npy"] + (["--dtype", "f16"] if dt == "f16" else []), a.reps)
            row[f"rlx_{dt}"] = rb
            if rb.get("error"):
                log(f"  rlx bench {dt}: {rb['error']}")
            else:
                log(f"  rlx bench vulkan compiled {dt}: wall {rb['median_ms']:.2f} ms ({B / rb['median_ms'] * 1e3:.0f} img/s), "
                    f"device {rb.get('device_ms')} ms, upload {rb.get('upload_ms')} ms, download {rb.get('download_ms')} ms")
        # PyTorch eager on CUDA
        mc = m.cuda().eval()
        xc = x.cuda()
        variants = {}
        with torch.no_grad():
            variants["f32 (PyTorch defaults: cuDNN TF32 on, matmul TF32 off)"] = torch_time(lambda: mc(xc), a.reps)
            c0, m0 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
            variants["f32, TF32 off"] = torch_time(lambda: mc(xc), a.reps)
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = c0, m0
            with torch.autocast("cuda", dtype=torch.float16):
                variants["autocast f16"] = torch_time(lambda: mc(xc), a.reps)
            mh, xh = mc.half(), xc.half()
            variants["f16 (.half())"] = torch_time(lambda: mh(xh), a.reps)
            r16 = mh(xh).float().cpu().numpy()  # PyTorch's own f16 distance from its f32 CPU result
            log(f"  PyTorch f16 (.half(), CUDA) against PyTorch CPU f32: {dist(r16, ref):.2e}, "
                f"top-1 agreement {float((r16.argmax(1) == ref.argmax(1)).mean()):.3f}")
            if "resnet" in name:
                ml, xl = mh.to(memory_format=torch.channels_last), xh.to(memory_format=torch.channels_last)
                variants["f16 channels_last"] = torch_time(lambda: ml(xl), a.reps)
        row["torch_ms"] = variants
        for k, v in variants.items():
            log(f"  PyTorch {torch.__version__} eager {k}: {v:.2f} ms ({B / v * 1e3:.0f} img/s)")
        res.append(row)
        del mc
        torch.cuda.empty_cache()
    json.dump(res, open(os.path.join(a.out, "vision.json"), "w"), indent=1)
    log("\n| model | rlx f32 img/s | rlx f16 img/s | best PyTorch f32 | best PyTorch f16 | rlx f16 / best torch f16 |")
    for row in res:
        def ips(rb):
            return a.batch / rb["median_ms"] * 1e3 if "median_ms" in rb else float("nan")
        t = row["torch_ms"]
        tf32 = min(v for k, v in t.items() if k.startswith("f32"))
        tf16 = min(v for k, v in t.items() if "16" in k)
        log(f"| {row['model']} | {ips(row['rlx_f32']):.0f} | {ips(row['rlx_f16']):.0f} | {a.batch / tf32 * 1e3:.0f} | "
            f"{a.batch / tf16 * 1e3:.0f} | {ips(row['rlx_f16']) / (a.batch / tf16 * 1e3):.2f} |")


# --------------------------------------------------------------------------- generate
def generate(a):
    import torch
    import generate_bench as gb
    import decoder_export as de
    legacy_export()
    size = "large"
    os.makedirs(a.work, exist_ok=True)
    t0 = time.time()
    path = gb.export(size, a.work)  # sets de's sizes
    log(f"generate: {size} exported ({time.time() - t0:.1f} s)")
    steps = a.steps
    res = {}
    for rep in range(a.rounds):
        r = subprocess.run([a.rlx, "generate", path, "--prompt", ",".join(map(str, de.PROMPT)), "-b", "vulkan", "-m", a.mode,
                            "-n", str(steps), "--json"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            log(f"rlx generate: exit {r.returncode}: {r.stderr[-800:]}")
            return
        lines = [json.loads(x) for x in r.stdout.splitlines()]
        toks = lines[:-1]
        ms = [x["ms"] for x in toks[1:]]
        rm = [x.get("run_ms") for x in toks[1:] if x.get("run_ms") is not None]
        res.setdefault("rlx_ms", []).append(statistics.median(ms))
        res["rlx_ids"] = [x["id"] for x in toks]
        log(f"rlx generate vulkan {a.mode} round {rep}: median step {statistics.median(ms):.3f} ms "
            f"(run_ms {statistics.median(rm) if rm else '-'}), first {toks[0]['ms']:.1f} ms, summary {json.dumps(lines[-1])}")
    m, kvh = de.build("logits", 0)
    hd = de.HEAD_DIM

    # The module makes its positions and mask with torch.arange / zeros / full and no device:
    # those three are pointed at the GPU (torch.set_default_device would put a TorchFunctionMode
    # in front of every op, slowing PyTorch's loop down).
    def on_gpu(f):
        def g(*x, **k):
            k.setdefault("device", "cuda")
            return f(*x, **k)
        return g
    torch.arange, torch.zeros, torch.full = on_gpu(torch.arange), on_gpu(torch.zeros), on_gpu(torch.full)

    def loop(mod, dtype):
        past = [torch.zeros(1, kvh, 0, hd, device="cuda", dtype=dtype) for _ in range(2 * de.LAYERS)]
        ids = torch.tensor([de.PROMPT], device="cuda")
        out, ts, total = [], [], 0
        with torch.no_grad():
            for _ in range(steps):
                t = ids.shape[1]
                s = time.perf_counter()
                am = torch.ones(1, total + t, dtype=torch.int64, device="cuda")
                pos = torch.arange(total, total + t, device="cuda")[None]
                logits, *past = mod(ids, am, pos, *past)
                nid = int(logits[0, -1].argmax())  # the host needs the id: a sync, as in any greedy loop
                ts.append((time.perf_counter() - s) * 1e3)
                total += t
                out.append(nid)
                ids = torch.tensor([[nid]], device="cuda")
        return out, ts

    # f16: autocast over the f32 module (its linears and matmuls in f16, softmax in f32)
    mod = m.cuda().eval()
    for dt in ("f32", "f16"):
        try:
            with torch.autocast("cuda", dtype=torch.float16, enabled=dt == "f16"):
                loop(mod, torch.float32)  # warm-up
                meds = []
                for _ in range(a.rounds):
                    ids, ts = loop(mod, torch.float32)
                    meds.append(statistics.median(ts[1:]))
        except Exception as e:  # noqa: BLE001
            log(f"PyTorch {dt}: {type(e).__name__}: {e}")
            continue
        res[f"torch_{dt}_ms"] = meds
        res[f"torch_{dt}_ids"] = ids
        log(f"PyTorch {torch.__version__} eager CUDA greedy loop {dt if dt == 'f32' else 'autocast f16'}: median step {statistics.median(meds):.3f} ms "
            f"(rounds {', '.join(f'{v:.3f}' for v in meds)}); ids equal rlx's: {ids == res['rlx_ids']}")
    json.dump(res, open(os.path.join(a.out, "generate.json"), "w"), indent=1)
    r = statistics.median(res["rlx_ms"])
    for dt in ("f32", "f16"):
        if f"torch_{dt}_ms" not in res:
            continue
        t = statistics.median(res[f"torch_{dt}_ms"])
        log(f"| generate d 2048 | rlx vulkan {r:.3f} ms = {1e3 / r:.0f} tok/s | PyTorch {dt} {t:.3f} ms = {1e3 / t:.0f} tok/s | "
            f"ratio {t / r:.2f}x |")


def genprofile(a):
    """`rlx run --profile` of one decode step of the large decoder (a past of 64 positions), and
    `rlx bench` of that step: where a token's time goes on Vulkan."""
    import decoder_export as de
    import generate_bench as gb
    legacy_export()
    path = gb.export("large", a.work)
    past, kvh, hd = 64, 2, gb.SIZES["large"]["HEAD_DIM"]
    d = os.path.join(a.work, "step64")
    os.makedirs(d, exist_ok=True)
    rs = np.random.RandomState(0)
    ins = {"input_ids": np.array([[7]], np.int64), "attention_mask": np.ones((1, past + 1), np.int64),
           "position_ids": np.array([[past]], np.int64), "use_cache_branch": np.array([True])}
    for n in de.past_names():
        ins[n] = rs.randn(1, kvh, past, hd).astype(np.float32)
    args = []
    for n, v in ins.items():
        np.save(os.path.join(d, n + ".npy"), v)
        args += ["-i", f"{n}=@{d}/{n}.npy"]
    r = subprocess.run([a.rlx, "run", path, "-b", "vulkan", "-m", "compiled", "--profile", "--repeat", "5"] + args,
                       capture_output=True, text=True, timeout=300)
    log("\n".join(r.stderr.splitlines()[:40]))
    rb = rlx_bench(a, path, args, 50)
    log(f"rlx bench one decode step (past 64) vulkan compiled: wall {rb.get('median_ms')} ms, device {rb.get('device_ms')} ms, "
        f"upload {rb.get('upload_ms')} ms ({rb.get('upload_mb')} MB), download {rb.get('download_ms')} ms "
        f"({rb.get('download_mb')} MB), kernels {rb.get('kernels')} {rb.get('error') or ''}")


def convparts(a):
    """ResNet-50's layer-1 convolutions taken apart (device ms of `rlx bench`, f32 and f16): the
    3x3 64->64 and 1x1 64->256 convolutions at batch 32, the matrix products they become, and
    the transpose back to NCHW, each as its own one-node ONNX graph (operands as inputs), beside
    PyTorch's own conv2d on the same shapes (cuDNN, NCHW and channels_last)."""
    import onnx
    import torch
    from onnx import TensorProto, helper
    d = os.path.join(a.work, "convparts")
    os.makedirs(d, exist_ok=True)

    def model(name, node, ins, out):
        g = helper.make_graph([node], name, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in ins],
                              [helper.make_tensor_value_info(out[0], TensorProto.FLOAT, out[1])])
        p = os.path.join(d, name + ".onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
        return p, [n for n, _ in ins]
    R = 32 * 56 * 56
    cases = [
        model("conv3x3_64", helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1]),
              [("x", [32, 64, 56, 56]), ("w", [64, 64, 3, 3]), ("b", [64])], ("y", [32, 64, 56, 56])),
        model("gemm_R_576_64", helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1),
              [("x", [R, 576]), ("w", [64, 576]), ("b", [64])], ("y", [R, 64])),
        model("conv1x1_64_256", helper.make_node("Conv", ["x", "w", "b"], ["y"]),
              [("x", [32, 64, 56, 56]), ("w", [256, 64, 1, 1]), ("b", [256])], ("y", [32, 256, 56, 56])),
        model("gemm_R_64_256", helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1),
              [("x", [R, 64]), ("w", [256, 64]), ("b", [256])], ("y", [R, 256])),
        model("transpose_64", helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1]),
              [("x", [32, 3136, 64])], ("y", [32, 64, 3136])),
        model("transpose_256", helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1]),
              [("x", [32, 3136, 256])], ("y", [32, 256, 3136])),
    ]
    for path, ins in cases:
        for dt in ("f32", "f16"):
            args = sum([["--input", f"{n}=random:{i + 1}"] for i, n in enumerate(ins)], [])
            rb = rlx_bench(a, path, args + (["--dtype", "f16"] if dt == "f16" else []), 20)
            log(f"  {os.path.basename(path)[:-5]:16s} {dt}: device {rb.get('device_ms')} ms {rb.get('error') or ''}")
    x = torch.randn(32, 64, 56, 56, device="cuda")
    for name, cout, k in (("conv3x3_64", 64, 3), ("conv1x1_64_256", 256, 1)):
        conv = torch.nn.Conv2d(64, cout, k, padding=k // 2).cuda()
        with torch.no_grad():
            for dt, mf in (("f32", torch.contiguous_format), ("f16", torch.contiguous_format), ("f16 channels_last", torch.channels_last)):
                c = conv.half() if dt.startswith("f16") else conv
                xx = (x.half() if dt.startswith("f16") else x).to(memory_format=mf)
                c = c.to(memory_format=mf)
                log(f"  PyTorch {name} {dt}: {torch_time(lambda: c(xx), 50):.3f} ms")


# --------------------------------------------------------------------------- detectors
def detectors(a):
    import detectors as det
    legacy_export()

    def ort_outputs(cache, path, image, od):
        import onnxruntime as ort
        os.makedirs(od, exist_ok=True)
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        outs = s.run(None, {"image": np.load(image)})
        for o, v in zip(s.get_outputs(), outs):
            np.save(os.path.join(od, o.name + ".npy"), v)
        return det.load(od + "/")
    det.ort_outputs = ort_outputs
    out = os.path.join(a.work, "detectors")
    rc = 0
    for backend in a.det_backends.split(","):
        sys.argv = ["detectors.py", "--rlx", a.rlx, "--out", out, "--backend", backend, "--modes", a.modes, "--all"]
        rc |= det.main() or 0
        # how far the outputs are from ONNX Runtime's, detection by detection (matched by score)
        for name in det.MODELS:
            try:
                ref = det.load(os.path.join(out, name + ".ort/"))
                for mode in a.modes.split(","):
                    got = det.load(os.path.join(out, f"{name}.{backend}.{mode}/"))
                    n = min(len(ref[1]), len(got[1]))
                    ds = np.abs(np.sort(ref[1])[::-1][:n] - np.sort(got[1])[::-1][:n])
                    j = [int(np.argmin(np.abs(got[1] - s))) for s in ref[1]]
                    lab = float(np.mean([got[2][jj] == l for jj, l in zip(j, ref[2])]))
                    box = float(max(np.abs(got[0][jj] - b).max() for jj, b in zip(j, ref[0])))
                    log(f"  {name} {backend}/{mode}: {len(got[1])} detections (ORT {len(ref[1])}); sorted scores differ by "
                        f"at most {ds.max():.2e} (median {np.median(ds):.1e}); nearest-score match: labels agree "
                        f"{lab:.3f}, boxes within {box:.3g} px")
            except Exception as e:  # noqa: BLE001
                log(f"  {name} {backend}: {e}")
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--work", default="/tmp/rlx-gpu-targets")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/rlx-gpu-targets"))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--models", default="resnet50,vit_s_16")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", default="compiled")
    ap.add_argument("--modes", default="compiled")
    ap.add_argument("--det-backends", default="vulkan,cpu")
    ap.add_argument("what", nargs="+")
    a = ap.parse_args()
    a.rlx = os.path.abspath(a.rlx)
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    rc = 0
    for w in a.what:
        log(f"== {w}")
        try:
            rc |= {"vision": vision, "generate": generate, "genprofile": genprofile, "detectors": detectors,
                   "convparts": convparts}[w](a) or 0
        except Exception as e:  # noqa: BLE001 -- one part failing must not lose the others' figures
            import traceback
            traceback.print_exc()
            log(f"{w}: {type(e).__name__}: {e}")
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
