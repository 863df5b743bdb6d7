#!/usr/bin/python3
"""The model zoo as the measure (issue 30): torchvision's classification architectures
(Debian's python3-torchvision 0.14, video classifiers included) and torchaudio's models
(python3-torchaudio 0.13, where they export), exported with torch.onnx.export, each checked
against PyTorch and ONNX Runtime in every mode on the CPU (and with --backends cpu,vulkan on
Vulkan: lavapipe here), and rlx compiled timed against ONNX Runtime side by side.

Weights are seeded random ones (nothing is downloaded). BatchNorm statistics are made realistic:
one forward pass in training mode (momentum 1, no gradients) over a seeded batch sets every
running mean and variance to the statistics its layer actually sees, so activations neither
vanish nor explode through deep networks, as with trained weights.

Exports are cached under --out (DIR/NAME/: model.onnx, the input, PyTorch's output, ONNX
Runtime's output, meta.json); a rerun only runs. Weights torchvision initialises to zero (ViT's
head) are drawn randomly too. Correctness: an output passes when max |rlx - ref| <= TOL * max |ref|
against both PyTorch and ONNX Runtime (TOL 1e-4 by default, or twice ONNX Runtime's own
distance from PyTorch where that is larger: deep networks accumulate rounding, ResNet-101's
two references differ by 1.1e-4; the distance is printed). torchaudio's hubert_base is left out: in torchaudio 0.13 it is
wav2vec2_base's network (the same graph). Timing (CPU, compiled):
in each round `rlx bench --modes compiled` then ONNX Runtime (bench/ort_time.cjs, pool threads
sleeping between runs: the better setting on a shared machine), both with --threads threads;
the ratio rlx/ORT is taken per round and the table shows the median over rounds. After the first
round a model gets enough reps for --min-ms per side (a 3 ms model's median of 10 runs swings
with the machine's load).

  bench/zoo.py [--rlx build/apps/rlx/rlx] [--out build/zoo] [-k resnet18,vit] [--all]
               [--backends cpu[,vulkan]] [--modes eager,lazy,compiled] [--vulkan-k NAMES]
               [--no-time] [--no-ort] [--size 224] [--rounds 3] [--reps 10] [--threads 2]
               [--table FILE.md] [--list] [--export-only] [--profile N]

-k takes comma-separated substrings (a model runs when its name contains one of them; an exact
name selects only that model). The default set is one or two models of every family at its
usual size; --all adds the remaining torchvision variants (large: several GB of exports).
Exit status: 0 when every selected model that exported passes in every mode and backend run,
1 otherwise (a refusal counts: the zoo is the measure; export failures alone do not: they are
listed as such).
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
ORT_DIR = os.environ.get("RLX_ORT_DIR", os.path.expanduser("~/.cache/rlx/onnxruntime-node"))
ORT_PACKAGE = "onnxruntime-node@1.30.0"
EXPORT_VERSION = "1"  # bump when what an export holds changes


# --------------------------------------------------------------------------- the zoo
def vision(name, builder=None, size=None, video=False, timed=True, extra=False):
    return dict(kind="video" if video else "image", name=name, builder=builder, size=size, timed=timed, extra=extra)


def audio(name, builder, inputs, timed=True):
    return dict(kind="audio", name=name, builder=builder, inputs=inputs, timed=timed, extra=False)


DEFAULT_VISION = [
    "alexnet", "vgg11_bn", "resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2", "densenet121", "squeezenet1_0",
    "squeezenet1_1", "googlenet", "inception_v3", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large",
    "mnasnet0_5", "mnasnet1_0", "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "efficientnet_b0", "efficientnet_v2_s",
    "regnet_x_400mf", "regnet_y_400mf", "regnet_y_1_6gf", "convnext_tiny", "vit_b_32", "swin_t", "swin_v2_t", "maxvit_t",
]


def zoo():
    """Every model: the default set, then the --all extras."""
    import torchvision.models as tvm
    models = [vision(n) for n in DEFAULT_VISION]
    # ViT-S/16 (DeiT-S's shape): not a torchvision builder, but the ViT most often deployed at this size.
    models.append(vision("vit_s_16", lambda: __import__("torchvision.models.vision_transformer", fromlist=["x"]).VisionTransformer(
        image_size=224, patch_size=16, num_layers=12, num_heads=6, hidden_dim=384, mlp_dim=1536)))
    models += [vision(n, video=True) for n in ("r3d_18", "mc3_18", "r2plus1d_18")]
    models.append(vision("s3d", size=224, video=True))  # its last pooling window is 2 x 7 x 7: 16 x 224 x 224 at least
    models += audio_models()
    have = {m["name"] for m in models}
    models += [vision(n, extra=True) for n in tvm.list_models(module=tvm) if n not in have]
    return models


def audio_models():
    def ta():
        import torchaudio.models as tam
        return tam

    def first(m):  # models returning (output, lengths): keep the output
        import torch

        class First(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, *x):
                y = self.m(*x)
                return y[0] if isinstance(y, tuple) else y
        return First()

    def wave(n, t):
        return lambda g: [("waveform", __import__("torch").randn(n, t, generator=g) * 0.1)]

    return [
        audio("wav2letter", lambda: ta().wav2letter.Wav2Letter(num_classes=40, input_type="waveform", num_features=1),
              lambda g: [("waveform", __import__("torch").randn(1, 1, 16000, generator=g) * 0.1)]),
        audio("deepspeech", lambda: ta().DeepSpeech(n_feature=80, n_hidden=512, n_class=40),
              lambda g: [("features", __import__("torch").randn(1, 1, 200, 80, generator=g))]),
        audio("conv_tasnet", lambda: ta().conv_tasnet_base(num_sources=2),
              lambda g: [("mixture", __import__("torch").randn(1, 1, 8000, generator=g) * 0.1)]),
        audio("wav2vec2_base", lambda: first(ta().wav2vec2_base()), wave(1, 16000)),
        audio("conformer", lambda: first(ta().Conformer(input_dim=80, num_heads=4, ffn_dim=256, num_layers=4,
                                                       depthwise_conv_kernel_size=31)),
              lambda g: [("features", __import__("torch").randn(1, 200, 80, generator=g)),
                         ("lengths", __import__("torch").tensor([200]))]),
        audio("emformer", lambda: first(ta().Emformer(input_dim=128, num_heads=4, ffn_dim=256, num_layers=4, segment_length=8,
                                                     right_context_length=2)),
              lambda g: [("features", __import__("torch").randn(1, 66, 128, generator=g)),
                         ("lengths", __import__("torch").tensor([64]))]),
        audio("wavernn", lambda: ta().WaveRNN(upsample_scales=[5, 5, 8], n_classes=256, hop_length=200, n_res_block=4,
                                              n_rnn=256, n_fc=256, n_freq=80, n_hidden=64, n_output=64),
              lambda g: [("waveform", __import__("torch").randn(1, 1, (20 - 5 + 1) * 200, generator=g) * 0.1),
                         ("specgram", __import__("torch").randn(1, 1, 80, 20, generator=g))]),
        audio("hdemucs_low", lambda: ta().hdemucs_low(sources=["drums", "bass", "other", "vocals"]),
              lambda g: [("mixture", __import__("torch").randn(1, 2, 44100, generator=g) * 0.1)]),
        audio("tacotron2", lambda: first(ta().Tacotron2(n_symbol=148)),
              lambda g: [("tokens", __import__("torch").randint(0, 148, (1, 24), generator=g)),
                         ("token_lengths", __import__("torch").tensor([24])),
                         ("mel", __import__("torch").randn(1, 80, 40, generator=g)),
                         ("mel_lengths", __import__("torch").tensor([40]))]),
    ]


def select(models, k, all_models):
    if k:
        pats = [p for p in k.split(",") if p]
        names = {m["name"] for m in models}
        exact = [p for p in pats if p in names]
        return [m for m in models if m["name"] in exact or any(p in m["name"] for p in pats if p not in names)]
    return [m for m in models if all_models or not m["extra"]]


# --------------------------------------------------------------------------- export
def realistic_bn(model, x, g):
    """BatchNorm running statistics from one training-mode pass over x (momentum 1), affine
    parameters spread a little: what a trained network's layers look like to the next layer."""
    import torch
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    with torch.no_grad():
        for m in bns:
            m.momentum = 1.0
            if m.affine:
                m.weight.copy_(1 + 0.2 * (torch.rand(m.weight.shape, generator=g) - 0.5))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
        model.train()
        model(*x)
        model.eval()


def build(spec, size, seed):
    """(module, [(input name, tensor)], output names)."""
    import torch
    import torchvision.models as tvm
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    if spec["kind"] == "audio":
        m = spec["builder"]()
        inputs = spec["inputs"](g)
        calib = [t for _, t in inputs]
    else:
        if spec["builder"]:
            m = spec["builder"]()
        elif spec["kind"] == "video":
            m = getattr(tvm.video, spec["name"])()
        else:
            kw = {}
            if spec["name"] in ("googlenet", "inception_v3"):
                kw = dict(aux_logits=False, init_weights=True)
            m = getattr(tvm, spec["name"])(**kw)
        s = spec.get("size") or size
        if spec["name"] in ("vit_s_16",) or spec["name"].startswith(("vit_", "maxvit", "swin_v2")):
            s = 224  # fixed image size (position embeddings, MaxViT's partitions)
        if spec["kind"] == "video":
            v = spec.get("size") or min(s, 112)
            shape, cshape = (1, 3, 16, v, v), (2, 3, 16, v, v)
        else:
            shape, cshape = (1, 3, s, s), (4, 3, s, s)
        inputs = [("image" if spec["kind"] == "image" else "video", torch.randn(*shape, generator=g))]
        calib = [torch.randn(*cshape, generator=g)]
    with torch.no_grad():  # weights initialised to zero (ViT's head): random, so the output depends on them
        for p in m.parameters():
            if p.dim() >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=g) / p[0].numel() ** 0.5)
    realistic_bn(m, calib, g)
    m.eval()
    return m, inputs


def export_one(spec, d, size, seed):
    """Exports into d; returns meta (or meta with "export_error")."""
    import torch
    key = f"{EXPORT_VERSION}:{spec['name']}:{size}:{seed}:{torch.__version__}"
    mp = os.path.join(d, "meta.json")
    if os.path.exists(mp):
        meta = json.load(open(mp))
        if meta.get("key") == key:
            return meta
    os.makedirs(d, exist_ok=True)
    t0 = time.time()
    meta = {"key": key, "name": spec["name"], "kind": spec["kind"]}
    try:
        m, inputs = build(spec, size, seed)
        meta["params"] = int(sum(p.numel() for p in m.parameters()))
        names = [n for n, _ in inputs]
        args = tuple(t for _, t in inputs)
        with torch.no_grad():
            ref = m(*args)
        ref = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        onames = [f"out{i}" if len(ref) > 1 else "output" for i in range(len(ref))]
        import warnings
        warnings.filterwarnings("ignore")
        tmp = os.path.join(d, "model.onnx.tmp")
        # Traced with autograd on: under no_grad, nn.MultiheadAttention (ViT) takes its fused
        # fast path, which torch.onnx cannot export.
        torch.onnx.export(m, args, tmp, input_names=names, output_names=onames, opset_version=17,
                          do_constant_folding=True)
        os.replace(tmp, os.path.join(d, "model.onnx"))
        import onnx
        kept = {i.name for i in onnx.load(os.path.join(d, "model.onnx"), load_external_data=False).graph.input}
        inputs = [(n, t) for n, t in inputs if n in kept]  # an input the trace folded away (Emformer's lengths)
        names = [n for n, _ in inputs]
        for n, t in inputs:
            np.save(os.path.join(d, f"in.{n}.npy"), t.numpy())
        for n, t in zip(onames, ref):
            np.save(os.path.join(d, f"torch.{n}.npy"), t.detach().numpy())
        meta.update(inputs=names, outputs=onames, export_s=round(time.time() - t0, 1))
    except ModuleNotFoundError:  # torchaudio not installed: said by the caller, not cached
        raise
    except Exception as e:  # an architecture torch.onnx cannot export: recorded, not fatal
        msg = str(e).strip().splitlines()
        meta["export_error"] = f"{type(e).__name__}: {msg[0][:200] if msg else ''}"
    json.dump(meta, open(mp + ".tmp", "w"))
    os.replace(mp + ".tmp", mp)
    return meta


# --------------------------------------------------------------------------- ORT
def ensure_ort(ort_dir):
    if os.path.isdir(os.path.join(ort_dir, "node_modules", "onnxruntime-node")):
        return True
    os.makedirs(ort_dir, exist_ok=True)
    print(f"zoo: npm install {ORT_PACKAGE} into {ort_dir}", file=sys.stderr)
    r = subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund", "--no-save", "--prefix", ort_dir,
                        ORT_PACKAGE], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        sys.exit(f"zoo: npm install {ORT_PACKAGE} failed (or pass --no-ort):\n{r.stderr[-2000:]}")
    return True


def ort_reference(a, d, meta):
    """ONNX Runtime's outputs for the export (tests/onnx/ort_run.js), cached beside it."""
    od = os.path.join(d, "ort")
    want = [os.path.join(od, n + ".npy") for n in meta["outputs"]]
    if not all(os.path.exists(p) for p in want):
        env = dict(os.environ, NODE_PATH=os.path.join(a.ort_dir, "node_modules"))
        r = subprocess.run(["node", os.path.join(ROOT, "tests", "onnx", "ort_run.js"), os.path.join(d, "model.onnx"), od,
                            "--threads", str(a.threads)] + [f"{n}={os.path.join(d, f'in.{n}.npy')}" for n in meta["inputs"]],
                           capture_output=True, text=True, env=env, timeout=1800)
        if r.returncode != 0:
            return None, "ORT failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200]
    return [np.load(p) for p in want], ""


# --------------------------------------------------------------------------- checks
def distance(got, ref):
    """max |got - ref| / max |ref|; inf on a shape mismatch or NaN where ref has none."""
    if got.shape != ref.shape:
        if got.size != ref.size:
            return float("inf")
        got = got.reshape(ref.shape)
    if got.dtype.kind in "iub" or ref.dtype.kind in "iub":
        return 0.0 if np.array_equal(got, ref) else float("inf")
    g, r = got.astype(np.float64), ref.astype(np.float64)
    if np.isnan(g).any() != np.isnan(r).any():
        return float("inf")
    scale = max(1e-6, float(np.nanmax(np.abs(r))) if r.size else 1.0)
    return float(np.nanmax(np.abs(g - r)) / scale) if r.size else 0.0


def run_rlx(a, d, meta, backend, mode):
    """(status, worst distance against PyTorch, against ORT, seconds): status 'ok', 'FAIL', or an error line."""
    od = os.path.join(d, f"rlx.{backend}.{mode}")
    cmd = [a.rlx, "run", os.path.join(d, "model.onnx"), "-b", backend, "-m", mode, "--out-dir", od]
    if mode == "compiled":
        # The second run's outputs: a compiled plan packs weights and makes its oneDNN convolutions
        # before its second run, and that steady state is what the timing measures.
        cmd += ["--repeat", "2"]
    for n in meta["inputs"]:
        cmd += ["-i", f"{n}=@{os.path.join(d, f'in.{n}.npy')}"]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout,
                           env=dict(os.environ, RLX_NUM_THREADS=str(a.threads)))
    except subprocess.TimeoutExpired:
        return f"timeout {a.timeout} s", None, None, time.time() - t0
    dt = time.time() - t0
    if r.returncode != 0:
        err = " ".join(r.stderr.strip().split()).replace(os.path.join(d, "model.onnx") + ": ", "")
        return f"exit {r.returncode}: {err[:300]}", None, None, dt
    dt_torch, dt_ort = 0.0, 0.0
    for i, n in enumerate(meta["outputs"]):
        p = os.path.join(od, n + ".npy")
        if not os.path.exists(p):
            return f"no output {n}", None, None, dt
        got = np.load(p)
        dt_torch = max(dt_torch, distance(got, np.load(os.path.join(d, f"torch.{n}.npy"))))
        if meta.get("ort_ok"):
            dt_ort = max(dt_ort, distance(got, np.load(os.path.join(d, "ort", n + ".npy"))))
    # Deep networks accumulate rounding: where ONNX Runtime and PyTorch themselves differ by more
    # than half the tolerance, the band is twice their distance (ResNet-101: 1.1e-4).
    tol = max(a.tol, 2 * meta.get("ort_vs_torch", 0.0))
    ok = dt_torch <= tol and (not meta.get("ort_ok") or dt_ort <= tol)
    return ("ok" if ok else "FAIL"), dt_torch, (dt_ort if meta.get("ort_ok") else None), dt


# --------------------------------------------------------------------------- timing
def time_pair(a, d, meta):
    """[(rlx ms, ORT ms)] per round."""
    model = os.path.join(d, "model.onnx")
    env = dict(os.environ, RLX_NUM_THREADS=str(a.threads))
    bench = [a.rlx, "bench", model, "--modes", "compiled", "-b", "cpu", "--warmup", str(a.warmup), "--reps", str(a.reps),
             "--format", "json"]
    for n in meta["inputs"]:
        bench += ["-i", f"{n}=@{os.path.join(d, f'in.{n}.npy')}"]
    in_dir = os.path.join(d, "ort_in")
    os.makedirs(in_dir, exist_ok=True)
    for n in meta["inputs"]:
        x = np.load(os.path.join(d, f"in.{n}.npy"))
        np.save(os.path.join(in_dir, n + ".npy"), x)
    rounds, reps = [], a.reps
    for _ in range(a.rounds):
        bench[bench.index("--reps") + 1] = str(reps)
        r = subprocess.run(bench, capture_output=True, text=True, env=env, timeout=a.timeout)
        if r.returncode != 0:
            return None, f"rlx bench (exit {r.returncode}): " + " ".join(r.stderr.split())[-200:]
        row = [x for x in json.loads(r.stdout)["rows"] if x["mode"] == "compiled"][0]
        o = subprocess.run(["node", os.path.join(HERE, "ort_time.cjs"), a.ort_dir, model, in_dir, str(a.threads),
                            str(a.warmup), str(reps), os.path.join(d, "ort_time_out"), a.ort_spin],
                           capture_output=True, text=True, timeout=a.timeout)
        if o.returncode != 0:
            return None, "ORT: " + " ".join(o.stderr.split())[:200]
        rounds.append((row["median_ms"], json.loads(o.stdout.strip().splitlines()[-1])["median_ms"]))
        # a small model gets more reps, so that each side of a round runs for --min-ms at least
        reps = max(a.reps, min(200, int(a.min_ms / max(0.05, min(rounds[-1])) + 1)))
    return rounds, ""


# --------------------------------------------------------------------------- --profile
def conv_kinds(model_path):
    """{ONNX Conv output name: 'conv depthwise' | 'conv grouped' | 'conv 1x1' | 'conv KxK'}."""
    import onnx
    m = onnx.load(model_path)
    shapes = {i.name: list(i.dims) for i in m.graph.initializer}
    kinds = {}
    for n in m.graph.node:
        if n.op_type != "Conv":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        w = shapes.get(n.input[1])
        group = attrs.get("group", 1)
        k = attrs.get("kernel_shape") or (w[2:] if w else [])
        if group > 1 and w and w[1] == 1:
            kind = "conv depthwise"
        elif group > 1:
            kind = "conv grouped"
        elif all(x == 1 for x in k):
            kind = "conv 1x1"
        else:
            kind = "conv " + "x".join(map(str, k))
        if len(k) == 1:
            kind += " (1-D)"
        kinds[n.output[0]] = kind
    return kinds


def profile(a, d, meta, runs):
    """Per-kernel minimum over `runs` processes of `rlx run --profile --repeat 5` (a busy machine
    preempts single kernels), summed by kind: [(kind, ms, GFLOP)], total ms."""
    import re
    line = re.compile(r"^\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+(?: \(packed\))?)\s+(.*)$")
    cmd = [a.rlx, "run", os.path.join(d, "model.onnx"), "-b", "cpu", "-m", "compiled", "--profile", "--repeat", "5"]
    for n in meta["inputs"]:
        cmd += ["-i", f"{n}=@{os.path.join(d, f'in.{n}.npy')}"]
    best = {}
    for _ in range(runs):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout,
                           env=dict(os.environ, RLX_NUM_THREADS=str(a.threads)))
        if r.returncode != 0:
            return None, 0.0
        seen = {}
        for l in (r.stdout + r.stderr).splitlines():
            mt = line.match(l)
            if not mt:
                continue
            ms, gflops, op, label = float(mt.group(1)), float(mt.group(3)), mt.group(5), mt.group(6)
            key = (op, label, seen.setdefault((op, label), 0))
            seen[(op, label)] += 1
            if key not in best or ms < best[key][0]:
                best[key] = (ms, gflops * ms * 1e-3)
    kinds = conv_kinds(os.path.join(d, "model.onnx"))
    sums = {}
    for (op, label, _), (ms, gflop) in best.items():
        kind = op
        if op in ("conv2d", "conv2d+epilogue"):  # a convolution's epilogue (its consumer) counts with it
            mn = re.search(r"node '([^']+)'", label)
            name = mn.group(1) if mn else ""
            if name not in kinds and "/" in name:  # a 1-D conv runs as '<output>/conv2d'
                name = name.rsplit("/", 1)[0]
            kind = kinds.get(name, "conv2d")
        elif op == "fused":
            kind = "fused elementwise"
        t = sums.setdefault(kind, [0.0, 0.0])
        t[0] += ms
        t[1] += gflop
    total = sum(v[0] for v in sums.values())
    return sorted(((k, v[0], v[1]) for k, v in sums.items()), key=lambda x: -x[1]), total


def print_profiles(a, models):
    for spec in models:
        d = os.path.join(a.out, spec["name"])
        mp = os.path.join(d, "meta.json")
        if not os.path.exists(mp) or "export_error" in json.load(open(mp)):
            print(f"{spec['name']}: not exported (run without --profile first)")
            continue
        rows, total = profile(a, d, json.load(open(mp)), a.profile)
        if rows is None:
            print(f"{spec['name']}: rlx run --profile failed")
            continue
        print(f"\n{spec['name']}: compiled, CPU, {a.threads} threads; each kernel's fastest of {a.profile} profiled runs, "
              f"summed by kind: {total:.1f} ms\n")
        print("| kind | ms | % | GFLOP/s |")
        print("| --- | ---: | ---: | ---: |")
        for kind, ms, gflop in rows:
            if ms / total < 0.01:
                continue
            print(f"| {kind} | {ms:.2f} | {100 * ms / total:.0f} | {gflop / ms * 1e3:.1f} |" if gflop > 0 else
                  f"| {kind} | {ms:.2f} | {100 * ms / total:.0f} | |")


# --------------------------------------------------------------------------- main
def fmt_params(n):
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", default=os.path.join(ROOT, "build", "apps", "rlx", "rlx"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "zoo"), help="export cache (default build/zoo)")
    ap.add_argument("-k", default="", help="comma-separated name substrings (an exact name selects only that model)")
    ap.add_argument("--all", action="store_true", help="every torchvision classifier, not one or two per family")
    ap.add_argument("--list", action="store_true", help="list the selected models and exit")
    ap.add_argument("--export-only", action="store_true", help="export (into --out) and stop")
    ap.add_argument("--backends", default="cpu", help="cpu, vulkan or cpu,vulkan")
    ap.add_argument("--modes", default="eager,lazy,compiled")
    ap.add_argument("--vulkan-k", default="", help="on Vulkan, only models matching these substrings (default: all selected)")
    ap.add_argument("--size", type=int, default=224, help="image side for CNNs (ViT, Swin V2 and MaxViT keep 224; video 112 at most)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tol", type=float, default=1e-4, help="max |rlx - ref| / max |ref| allowed")
    ap.add_argument("--no-ort", action="store_true", help="check against PyTorch only, no timing (no onnxruntime-node needed)")
    ap.add_argument("--ort-dir", default=ORT_DIR, help="npm prefix holding onnxruntime-node (installed there if missing)")
    ap.add_argument("--ort-spin", default="0", help="ORT pool threads spin between runs (1) or sleep (0, default)")
    ap.add_argument("--no-time", action="store_true", help="correctness only")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--min-ms", type=float, default=400, help="after the first round, reps enough for this many ms per side")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=900, help="seconds for one rlx or ORT process")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="instead of checking: each selected (exported) model's compiled CPU profile, the fastest of N "
                         "runs per kernel, summed by kind (depthwise, grouped, 1x1, KxK convolutions, ...)")
    ap.add_argument("--table", help="also write the Markdown table to this file (atomically)")
    a = ap.parse_args()

    models = select(zoo(), a.k, a.all)
    if a.list:
        for m in models:
            print(m["name"], m["kind"])
        return 0
    if not models:
        sys.exit(f"zoo: -k {a.k!r} selects no model (--list --all shows them)")
    if not os.access(a.rlx, os.X_OK) and not a.export_only:
        sys.exit(f"zoo: {a.rlx} not found: build first (scripts/build.sh)")
    a.rlx = os.path.abspath(a.rlx)
    backends = [b for b in a.backends.split(",") if b]
    modes = [m for m in a.modes.split(",") if m]
    for b in backends:
        if b not in ("cpu", "vulkan"):
            sys.exit(f"zoo: unknown backend {b!r} (cpu, vulkan)")
    for m in modes:
        if m not in ("eager", "lazy", "compiled"):
            sys.exit(f"zoo: unknown mode {m!r} (eager, lazy, compiled)")
    if not a.no_ort and not a.export_only:
        ensure_ort(a.ort_dir)
    os.makedirs(a.out, exist_ok=True)
    if a.profile:
        print_profiles(a, models)
        return 0
    vk_pats = [p for p in a.vulkan_k.split(",") if p]

    rows, status = [], 0
    for spec in models:
        name = spec["name"]
        d = os.path.join(a.out, name)
        t0 = time.time()
        try:
            meta = export_one(spec, d, a.size, a.seed)
        except ModuleNotFoundError as e:  # torchaudio not installed
            meta = {"export_error": f"{e} (apt-get install python3-torchaudio)"}
        row = {"name": name, "params": meta.get("params"), "cells": {}, "note": ""}
        if "export_error" in meta:
            meta["export_error"] = meta["export_error"].split(" Please feel free")[0]
        rows.append(row)
        if "export_error" in meta:
            row["note"] = "export: " + meta["export_error"]
            print(f"{name}: not exported: {meta['export_error']}", flush=True)
            continue
        if a.export_only:
            print(f"{name}: exported ({meta.get('export_s', 'cached')} s)", flush=True)
            continue
        if not a.no_ort:
            outs, err = ort_reference(a, d, meta)
            meta["ort_ok"] = outs is not None
            if outs is None:  # torch.onnx wrote a model ONNX Runtime refuses: rlx must refuse it cleanly (exit 2)
                row["note"] = "ONNX Runtime refuses the export, so checked against PyTorch only: " + err.replace(
                    "ORT failed: ort_run: Load model from " + os.path.join(d, "model.onnx") + " failed:", "")
            else:
                row["ort_vs_torch"] = meta["ort_vs_torch"] = max(distance(o, np.load(os.path.join(d, f"torch.{n}.npy")))
                                                                 for n, o in zip(meta["outputs"], outs))
        msgs = []
        for b in backends:
            if b == "vulkan" and vk_pats and not any(p in name for p in vk_pats):
                continue
            for mode in modes:
                st, dtorch, dort, dt = run_rlx(a, d, meta, b, mode)
                row["cells"][(b, mode)] = st
                if st != "ok":
                    status = 1
                    msgs.append(f"{b}/{mode}: {st}" + (f" (vs PyTorch {dtorch:.1e}, vs ORT {dort if dort is None else f'{dort:.1e}'})"
                                                       if dtorch is not None else ""))
                row.setdefault("dist", []).append(dtorch if dtorch is not None else float("nan"))
                if dort is not None:
                    row.setdefault("dist_ort", []).append(dort)
        if msgs:  # the same message in every mode and backend said once
            bodies = {m.split(": ", 1)[1] for m in msgs}
            if len(bodies) == 1 and len(msgs) == len(row["cells"]) > 1:
                msgs = [f"every mode: {bodies.pop()}"]
            row["note"] = (row["note"] + "; " if row["note"] else "") + "; ".join(msgs)
        if not a.no_time and not a.no_ort and spec["timed"] and meta.get("ort_ok") and "cpu" in backends \
                and row["cells"].get(("cpu", "compiled")) == "ok":
            rounds, err = time_pair(a, d, meta)
            if rounds:
                row["rlx_ms"] = statistics.median(r[0] for r in rounds)
                row["ort_ms"] = statistics.median(r[1] for r in rounds)
                row["ratio"] = statistics.median(r[0] / r[1] for r in rounds)
                row["ratios"] = [round(r[0] / r[1], 2) for r in rounds]
            else:
                row["note"] = (row["note"] + "; " if row["note"] else "") + err
        cells = " ".join(f"{b}/{m}={s if s in ('ok', 'FAIL') else 'refused' if s.startswith('exit 2:') else 'ERR'}" for (b, m), s in row["cells"].items())
        timing = f" rlx {row['rlx_ms']:.2f} ms ORT {row['ort_ms']:.2f} ms ratio {row['ratio']:.2f} (rounds {row['ratios']})" if "ratio" in row else ""
        ran = [x for x in row.get("dist", []) if x == x]
        dist = f" max dist vs PyTorch {max(ran):.1e}" if ran else ""
        ortd = f", ORT vs PyTorch {row['ort_vs_torch']:.1e}" if "ort_vs_torch" in row else ""
        print(f"{name}: {cells}{dist}{ortd}{timing} ({time.time() - t0:.0f} s)" + (f"\n  {row['note']}" if row["note"] else ""),
              flush=True)

    table = markdown(a, rows, backends, modes)
    print("\n" + table)
    if a.table:
        tmp = a.table + ".tmp"
        with open(tmp, "w") as f:
            f.write(table)
        os.replace(tmp, a.table)
    return status


def markdown(a, rows, backends, modes):
    combos = [(b, m) for b in backends for m in modes]
    timed = not a.no_time and not a.no_ort
    head = "| model | params | " + " | ".join(f"{b} {m}" for b, m in combos) + (" | rlx ms | ORT ms | rlx/ORT |" if timed else " |")
    lines = [head, "| --- | ---: | " + " | ".join(":---:" for _ in combos) + (" | ---: | ---: | ---: |" if timed else " |")]
    for r in rows:
        cells = []
        for c in combos:
            s = r["cells"].get(c)
            cells.append("-" if s is None else "pass" if s == "ok" else "**FAIL**" if s == "FAIL" else
                         "refused" if s.startswith("exit 2:") else "**error**")
        if not r["cells"]:
            cells = ["not exported" if r["note"].startswith("export") else "-"] + [""] * (len(combos) - 1)
        t = [f"{r['rlx_ms']:.1f}", f"{r['ort_ms']:.1f}", f"{r['ratio']:.2f}"] if "ratio" in r else ["", "", ""]
        lines.append(f"| {r['name']} | {fmt_params(r['params']) if r.get('params') else ''} | " + " | ".join(cells)
                     + (" | " + " | ".join(t) if timed else "") + " |")
    ratios = sorted(r["ratio"] for r in rows if "ratio" in r)
    exported = [r for r in rows if r["cells"]]
    passing = [r for r in exported if all(s == "ok" for s in r["cells"].values())]
    lines.append("")
    refused = any(str(s).startswith("exit 2:") for r in rows for s in r["cells"].values())
    lines.append(f"{len(rows)} models, {len(exported)} exported, {len(passing)} pass in every mode and backend run"
                 + ("; refused: rlx exits 2 with the reason below (unsupported, or a model ONNX Runtime refuses too)" if refused else "")
                 + f" (max |rlx - ref| <= {a.tol:g} max |ref|, against PyTorch" + ("" if a.no_ort else " and ONNX Runtime") + ").")
    if ratios:
        worst = sorted((r for r in rows if "ratio" in r), key=lambda r: -r["ratio"])[:5]
        lines.append(f"rlx compiled / ONNX Runtime over {len(ratios)} timed models ({a.threads} threads each, {a.rounds} rounds of "
                     f"{a.reps} reps or more (>= {a.min_ms:g} ms a side), median of per-round ratios): median {statistics.median(ratios):.2f}x, best "
                     f"{ratios[0]:.2f}x, worst {ratios[-1]:.2f}x ({', '.join('%s %.2f' % (r['name'], r['ratio']) for r in worst)}).")
    notes = [f"- {r['name']}: {r['note']}" for r in rows if r["note"]]
    if notes:
        lines.append("")
        lines.append("Notes:")
        lines += notes
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
