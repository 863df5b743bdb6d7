#!/usr/bin/python3
"""Issue 31: `rlx generate`'s capacity-planned KV cache (lib/runtime/kv_cache.h, docs/modes.md
"Generation"), on tests/onnx/decoder_export.py's logits decoder (attention_mask, position_ids,
logits; Hugging Face's cache layout), against PyTorch's own greedy loop:

- 200 greedy ids (the cache grows through the capacities 64, 128 and 256) equal PyTorch's in
  every mode; the per-token lines show the capacity the test expects for each step's past and
  that a new plan is made only when the capacity changes (the summary counts 3 plans);
- on every backend (the CPU: host pages read in place; Vulkan: device buffers that never leave
  the device), every step after the prompt writes each concat(past, new) into the cache itself
  (`appends_in_place` = the number of past inputs), copies no cache (`input_copy_bytes`: the ids,
  position and mask only, a deterministic counter of the session) and writes one row per head and
  past input into the cache (`cache_row_bytes`);
- the final cache (`--cache-out`: the prompt and every generated id but the last) equals
  PyTorch's final present.N.* in every mode;
- `--kv-cache grow` (the model specialised for each length) gives PyTorch's ids too;
- the same weights exported so that attention_mask is read but its zeros are ignored (a model the
  capacity cache cannot serve: its padding would be attended): `auto` notices at the first
  capacity step (its logits differ from the exact past's), falls back to the grown cache and
  still gives PyTorch's ids; `--kv-cache capacity` exits 2 saying why; a model without
  attention_mask is refused `--kv-cache capacity` too.

  tests/onnx/kv_cache_tests.py --rlx build/apps/rlx/rlx [--out DIR] [--backend cpu] [--modes eager,lazy,compiled]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decoder_export as de  # noqa: E402

LONG = 200


def expected_capacity(past):
    """The capacity a step over `past` positions runs at: the least power of two >= past + 1, at least 64."""
    c = 64
    while c < past + 1:
        c *= 2
    return c


def generate(rlx, path, backend, n, *extra):
    r = subprocess.run([rlx, "generate", path, "--prompt", ",".join(map(str, de.PROMPT)), "-b", backend, "-n", str(n), "--json",
                        "--no-cache"] + list(extra), capture_output=True, text=True)
    if r.returncode != 0:
        return None, None, r
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    return lines[-1], lines[:-1], r


def export_ignoring_mask(m, kvh, path):
    """The logits decoder's weights, exported so that attention_mask stays an input but its zeros
    change nothing (only the causal mask applies): equal to the original whenever the mask is all ones."""
    import torch

    class IgnoresMask(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, ids, attention_mask, position_ids, *past):
            b, t = ids.shape
            p = past[0].shape[2]
            qpos = torch.arange(t)[:, None] + p
            kpos = torch.arange(p + t)[None, :]
            mask = torch.where(kpos <= qpos, torch.zeros(()), torch.full((), -1e9))
            mask = mask + 0.0 * attention_mask[:, None, None, :].float()  # read, never decisive
            logits, presents = self.m.body(ids, position_ids, mask, past)
            return (logits, *presents)

    pn, qn = de.past_names(), de.present_names()
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
           "position_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    for n in pn:
        dyn[n] = {0: "batch", 2: "past"}
    for n in qn:
        dyn[n] = {0: "batch", 2: "total"}
    args = (torch.tensor([[1, 2]]), torch.ones(1, 5, dtype=torch.int64), torch.tensor([[3, 4]])) + \
        tuple(torch.randn(1, kvh, 3, de.HEAD_DIM) for _ in pn)
    with torch.no_grad():
        torch.onnx.export(IgnoresMask().eval(), args, path, input_names=["input_ids", "attention_mask", "position_ids"] + pn,
                          output_names=["logits"] + qn, dynamic_axes=dyn, opset_version=14)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--out", default=os.environ.get("RLX_TEST_TMP", "/tmp") + "/rlx_kv_cache_tests")
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

    de.STEPS = LONG  # the seed is chosen for clear greedy margins over PyTorch's whole LONG-step loop
    path, m = de.export("logits", a.out)
    kvh = 2
    want = np.load(os.path.join(a.out, "decoder_logits.ids.npy")).tolist()

    for mode in a.modes.split(","):
        cache_dir = os.path.join(a.out, f"cache_{a.backend}_{mode}")
        j, per, r = generate(rlx, path, a.backend, LONG, "-m", mode, "--cache-out", cache_dir)
        if j is None:
            report(False, f"capacity cache {a.backend} {mode}", f"exit {r.returncode}: {r.stderr[-800:]}")
            continue
        err = None
        caps = [x["capacity"] for x in per]
        want_caps = [0] + [expected_capacity(len(de.PROMPT) + k) for k in range(LONG - 1)]
        fresh = [x["specialised_anew"] for x in per[1:]]
        want_fresh = [k == 0 or want_caps[k + 1] != want_caps[k] for k in range(LONG - 1)]
        if j["ids"] != want:
            first = next(i for i, (x, y) in enumerate(zip(j["ids"], want)) if x != y) if len(j["ids"]) == len(want) else -1
            err = f"ids differ from PyTorch's from step {first + 1}: got {j['ids'][first:first + 8]}, want {want[first:first + 8]}"
        elif j["kv_cache"] != "capacity" or j["capacity_plans"] != 3 or j["capacity"] != 256:
            err = f"summary says kv_cache {j['kv_cache']}, {j['capacity_plans']} plans, capacity {j['capacity']}; want capacity, 3, 256"
        elif caps != want_caps:
            err = f"per-step capacities {caps[:3]}...{caps[58:70]}, want {want_caps[:3]}...{want_caps[58:70]}"
        elif fresh != want_fresh:
            err = f"a plan was made at steps {[k + 2 for k, x in enumerate(fresh) if x]}, want only where the capacity changes " \
                  f"{[k + 2 for k, x in enumerate(want_fresh) if x]}"
        else:
            # the in-place append: every concat(past, new) written into the cache (one per past
            # input), and the inputs copied per step are the ids, the position and the mask
            # (int64: 8 bytes each, C + 1 of the mask; lazy mode on Vulkan uploads the changed
            # elements and then, planning anew, the whole of them: 24 bytes more), never the cache
            # (kvh x C x head_dim f32 per input, 8 KiB and more here); the new rows go into the
            # cache, one row per head and past input (f32)
            n_past = len(de.past_names())
            row_bytes = n_past * kvh * de.HEAD_DIM * 4
            for x in per[1:]:
                c = x["capacity"]
                most = 8 * (c + 1) + 16 + 24
                if x["appends_in_place"] != n_past or x["input_copy_bytes"] > most or x["cache_row_bytes"] != row_bytes:
                    err = f"step {x['step']} (capacity {c}): {x['appends_in_place']} concats appended in place (want {n_past}), " \
                          f"{x['input_copy_bytes']} input bytes copied (want at most {most}: no copy of the cache), " \
                          f"{x['cache_row_bytes']} bytes of rows written into the cache (want {row_bytes}: one row per head)"
                    break
        if err is None:  # the final cache against PyTorch's final presents
            for n in de.present_names():
                got = np.load(os.path.join(cache_dir, n + ".npy"))
                ref = np.load(os.path.join(a.out, f"decoder_logits.{n}.npy"))
                if got.shape != ref.shape:
                    err = f"final cache {n}: shape {got.shape}, PyTorch's {ref.shape}"
                    break
                diff = float(np.abs(got - ref).max())
                if diff > 1e-4 * max(1.0, float(np.abs(ref).max())):
                    err = f"final cache {n}: differs from PyTorch's by {diff:.3g}"
                    break
        report(err is None, f"capacity cache {a.backend} {mode}: {LONG} ids and the final cache = PyTorch's through capacities "
               "64, 128, 256, a plan only per capacity, appended in place, one row per head written", err)

    grow_dir = os.path.join(a.out, f"cache_{a.backend}_grow")
    j, _, r = generate(rlx, path, a.backend, 64, "--kv-cache", "grow", "-m", "compiled", "--cache-out", grow_dir)
    err = None if j is not None and j["ids"] == want[:64] and j["kv_cache"] == "grow" and j["capacity_plans"] == 0 else \
        f"exit {r.returncode}: {r.stdout[-300:]} {r.stderr[-500:]}"
    for n in de.present_names() if err is None else ():
        # the prompt and 63 ids: PyTorch's first positions (a position's rows depend on the ids up to it only)
        got, ref = np.load(os.path.join(grow_dir, n + ".npy")), np.load(os.path.join(a.out, f"decoder_logits.{n}.npy"))
        ref = ref[:, :, :len(de.PROMPT) + 63]
        if got.shape != ref.shape or float(np.abs(got - ref).max()) > 1e-4 * max(1.0, float(np.abs(ref).max())):
            err = f"final cache {n}: shape {got.shape} (PyTorch's {ref.shape}) or values differ"
            break
    report(err is None, f"--kv-cache grow {a.backend}: 64 ids and the final cache = PyTorch's, no capacity plan", err)

    ignoring = os.path.join(a.out, "decoder_ignores_mask.onnx")
    if not os.path.exists(ignoring):
        export_ignoring_mask(m, kvh, ignoring)
    j, _, r = generate(rlx, ignoring, a.backend, 64, "-m", "compiled", "--verbose")
    report(j is not None and j["ids"] == want[:64] and j["kv_cache"] == "grow" and "does not honour attention_mask" in r.stderr,
           f"a model ignoring attention_mask's zeros {a.backend}: noticed at the first capacity step, grown cache, PyTorch's ids",
           f"exit {r.returncode}: {(j or {}).get('kv_cache')} {r.stdout[-200:]} {r.stderr[-600:]}")
    r = subprocess.run([rlx, "generate", ignoring, "--prompt", "5,17", "-n", "4", "--kv-cache", "capacity", "-b", a.backend],
                       capture_output=True, text=True)
    report(r.returncode == 2 and "--kv-cache capacity" in r.stderr and "attention_mask" in r.stderr,
           "--kv-cache capacity on that model exits 2 saying why", f"exit {r.returncode}: {r.stderr[-500:]}")
    r = subprocess.run([rlx, "generate", path, "--prompt", "5", "--kv-cache", "ring"], capture_output=True, text=True)
    report(r.returncode == 2 and "--kv-cache ring" in r.stderr, "--kv-cache ring exits 2", f"exit {r.returncode}: {r.stderr[-300:]}")
    not_dir = os.path.join(a.out, "not_a_directory")
    open(not_dir, "w").close()
    r = subprocess.run([rlx, "generate", path, "--prompt", "5", "-n", "2", "--cache-out", not_dir], capture_output=True, text=True)
    report(r.returncode == 2 and "not_a_directory is not a directory" in r.stderr, "--cache-out over a file exits 2 naming it",
           f"exit {r.returncode}: {r.stderr[-300:]}")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
