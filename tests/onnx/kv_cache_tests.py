#!/usr/bin/python3
"""Issue 31: `rlx generate`'s capacity-planned KV cache (lib/runtime/kv_cache.h, docs/modes.md
"Generation"), on tests/onnx/decoder_export.py's logits decoder (attention_mask, position_ids,
logits; Hugging Face's cache layout), against PyTorch's own greedy loop:

- 200 greedy ids (the cache grows through the capacities 64, 128 and 256) equal PyTorch's in
  every mode; the per-token lines show the capacity the test expects for each step's past and
  that a new plan is made only when the capacity changes (the summary counts 3 plans);
- on the CPU, every step after the prompt writes each concat(past, new) into the cache itself
  (`appends_in_place` = the number of past inputs) and copies no cache (`input_copy_bytes`: the
  ids, position and mask only, a deterministic counter of the session);
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
        j, per, r = generate(rlx, path, a.backend, LONG, "-m", mode)
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
        elif a.backend == "cpu":
            # the in-place append: every concat(past, new) written into the cache (one per past
            # input), and the inputs copied per step are the ids, the position and the mask
            # (int64: 8 bytes each, C + 1 of the mask), never the cache (kvh x C x head_dim f32
            # per input, 16 KiB and more here)
            n_past = len(de.past_names())
            for x in per[1:]:
                c = x["capacity"]
                most = 8 * (c + 1) + 16
                if x["appends_in_place"] != n_past or x["input_copy_bytes"] > most:
                    err = f"step {x['step']} (capacity {c}): {x['appends_in_place']} concats appended in place (want {n_past}), " \
                          f"{x['input_copy_bytes']} input bytes copied (want at most {most}: no copy of the cache)"
                    break
        report(err is None, f"capacity cache {a.backend} {mode}: {LONG} ids = PyTorch's through capacities 64, 128, 256, "
               "a plan only per capacity", err)

    j, _, r = generate(rlx, path, a.backend, 64, "--kv-cache", "grow", "-m", "compiled")
    report(j is not None and j["ids"] == want[:64] and j["kv_cache"] == "grow" and j["capacity_plans"] == 0,
           f"--kv-cache grow {a.backend}: 64 ids = PyTorch's, no capacity plan",
           f"exit {r.returncode}: {r.stdout[-300:]} {r.stderr[-500:]}")

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
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
