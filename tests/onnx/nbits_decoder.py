#!/usr/bin/python3
"""Issue 31: `rlx generate` on a decoder export with 4-bit weights. tests/onnx/decoder_export.py's
logits decoder, merged as Optimum's decoder_model_merged.onnx (an If on use_cache_branch), its
MatMuls with constant weights rewritten into com.microsoft MatMulNBits (4 bits, block 32, zero
points: what ONNX Runtime's MatMulNBitsQuantizer writes; scripts/nbits.py), inside the If's
branches, the lm_head included. References, both independent of rlx:

- PyTorch's own greedy loop over the same model with every linear's weight replaced by its
  4-bit values dequantized (scripts/nbits.py qdq; the seed kept only where every greedy choice
  of that loop wins by a clear margin);
- ONNX Runtime's greedy loop (tests/onnx/ort_greedy.js) on the 4-bit export itself, which must
  give PyTorch's ids too (skipped, and said so, where onnxruntime-node is absent).

Checked: 64 greedy ids of `rlx generate` equal PyTorch's in every mode, through the capacity KV
cache (--kv-cache capacity: one plan per capacity, 64 and 128); on the CPU every step after the prompt
appends each present into the cache in place and copies no cache; the export holds only
MatMulNBits for the linears (no f32 MatMul with a constant weight is left).

  tests/onnx/nbits_decoder.py --rlx build/apps/rlx/rlx [--out DIR] [--backend cpu] [--modes eager,lazy,compiled]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts"))
import decoder_export as de  # noqa: E402
import kv_cache_tests as kv  # noqa: E402
import nbits  # noqa: E402


def qdq_linears(m):
    """Every nn.Linear weight of m replaced by its 4-bit values dequantized (as MatMulNBits of the
    export's W^T computes with); returns the originals, to be put back before exporting."""
    import torch

    orig = {}
    with torch.no_grad():
        for name, mod in m.named_modules():
            if isinstance(mod, torch.nn.Linear):
                orig[name] = mod.weight.detach().clone()
                w = nbits.qdq(mod.weight.detach().numpy().T.copy())
                mod.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)))
    return orig


def restore(m, orig):
    import torch

    with torch.no_grad():
        for name, mod in m.named_modules():
            if name in orig:
                mod.weight.copy_(orig[name])


def export(out_dir):
    """The 4-bit merged export and PyTorch's greedy ids over the dequantized weights."""
    import onnx

    path = os.path.join(out_dir, "decoder_nbits4.onnx")
    for seed in range(100):
        m, kvh = de.build("logits", seed)
        orig = qdq_linears(m)
        ids, _, margin = de.reference(m, kvh, "logits")
        if margin >= de.MARGIN and len(set(ids)) > 8:
            break
    else:
        raise SystemExit(f"nbits4: no seed gives greedy margins of {de.MARGIN}")
    restore(m, orig)  # the export carries the f32 weights; the rewrite quantizes exactly those
    de.export_merged(m, kvh, os.path.join(out_dir, "decoder_nbits4.with_past.onnx"),
                     os.path.join(out_dir, "decoder_nbits4.no_past.onnx"), path)
    model = onnx.load(path)
    done = nbits.rewrite_matmuls(model)
    onnx.save(model, path)
    print(f"nbits4: seed {seed}, least greedy margin {margin:.3f} (PyTorch, dequantized weights), {len(done)} weights "
          f"quantized, ids {ids[:8]}...", flush=True)
    return path, ids, len(done)


def count_ops(model):
    """{op_type: count} over the graph and its subgraphs, and the MatMuls whose B is an initializer."""
    counts, const_mm = {}, 0

    def walk(g, inits):
        nonlocal const_mm
        inits = inits | {t.name for t in g.initializer}
        for n in g.node:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
            const_mm += n.op_type == "MatMul" and n.input[1] in inits
            for a in n.attribute:
                for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    walk(sub, inits)

    walk(model.graph, set())
    return counts, const_mm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--out", default=os.environ.get("RLX_TEST_TMP", "/tmp") + "/rlx_nbits_decoder")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--modes", default="eager,lazy,compiled")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rlx = os.path.abspath(a.rlx)
    fails = 0

    def report(ok, what, detail=""):
        nonlocal fails
        print(f"{'ok  ' if ok else 'FAIL'} {what}" + ("" if ok else f"\n     {detail}"), flush=True)
        fails += not ok

    import onnx

    path, want, n_weights = export(a.out)
    counts, const_mm = count_ops(onnx.load(path))
    # per layer q, k, v, o, gate, up, down, and the lm_head; each branch of the If holds its own nodes
    want_nodes = 2 * (7 * de.LAYERS + 1)
    report(counts.get("MatMulNBits") == want_nodes and const_mm == 0 and n_weights == 7 * de.LAYERS + 1,
           f"the export: {want_nodes} MatMulNBits over {n_weights} weights, no MatMul with a constant weight left",
           f"{counts.get('MatMulNBits')} MatMulNBits, {const_mm} constant MatMuls, {n_weights} weights")

    n_past = len(de.past_names())
    # the capacities the steps after the prompt run at: the least power of two >= past + 1, at least 64
    caps = {kv.expected_capacity(len(de.PROMPT) + k) for k in range(de.STEPS - 1)}
    for mode in a.modes.split(","):
        r = subprocess.run([rlx, "generate", path, "--prompt", ",".join(map(str, de.PROMPT)), "-b", a.backend, "-m", mode,
                            "-n", str(de.STEPS), "--json", "--no-cache", "--kv-cache", "capacity"], capture_output=True, text=True)
        err = None
        if r.returncode != 0:
            err = f"exit {r.returncode}: {r.stderr.strip()[-1500:]}"
        else:
            lines = [json.loads(x) for x in r.stdout.splitlines()]
            j, per = lines[-1], lines[:-1]
            if j["ids"] != want:
                first = next((i for i, (x, y) in enumerate(zip(j["ids"], want)) if x != y), -1)
                err = f"ids differ from PyTorch's from step {first + 1}: got {j['ids']}, want {want}"
            elif j["kv_cache"] != "capacity" or j["capacity_plans"] != len(caps) or {x["capacity"] for x in per[1:]} != caps:
                err = f"summary says kv_cache {j['kv_cache']}, {j['capacity_plans']} capacity plans; want capacity, {len(caps)} " \
                      f"(capacities {sorted(caps)})"
            elif a.backend == "cpu":
                for x in per[1:]:
                    most = 8 * (x["capacity"] + 1) + 16 + 1  # ids, position, mask (int64) and use_cache_branch (one bool)
                    if x["appends_in_place"] != n_past or x["input_copy_bytes"] > most:
                        err = f"step {x['step']}: {x['appends_in_place']} concats appended in place (want {n_past}), " \
                              f"{x['input_copy_bytes']} input bytes copied (want at most {most}: no copy of the cache)"
                        break
        report(err is None, f"4-bit merged decoder generate {a.backend} {mode}: {de.STEPS} ids = PyTorch's (dequantized weights), "
               "capacity cache" + (", appended in place" if a.backend == "cpu" else ""), err)

    if a.backend == "cpu":
        fails += de.ort_greedy_check(path, want, "4-bit merged decoder")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
