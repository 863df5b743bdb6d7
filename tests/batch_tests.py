#!/usr/bin/python3
"""Issue 27: batch jobs, `rlx run MODEL --batch LIST --out-dir DIR` (docs/batch.md).

  tests/batch_tests.py --rlx build/apps/rlx/rlx [-k SUBSTRING]

Every expected value comes from NumPy or from rlx run on one item alone (a separate process,
the path the batch job must agree with); nothing is compared with the batch job's own output.
- outputs equal the same item run alone (byte for byte), and NumPy for a simple graph; stacked
  runs (--batch-size) agree with NumPy and with the items run alone within float tolerance;
- bad items (missing file, wrong dtype, shape mismatch, hostile ids, malformed JSON, duplicate
  ids) are reported in results.jsonl while the others finish; exit codes 0 / 1 / 2;
- resume (skipped), --force, a short output redone, --max-errors;
- GNU parallel runs 4 shards into one directory: every item once;
- a shard killed with SIGKILL midway and rerun: every output complete and byte-identical to a
  clean run, no temporary files left;
- --batch - as a worker: a result line comes back for each item before stdin closes.
"""
import glob
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile

import numpy as np

import clitest  # noqa: E402
from clitest import ROOT, check  # noqa: E402

MLP = [os.path.join(ROOT, "graphs/mlp.json"), "-p", os.path.join(ROOT, "graphs/mlp.safetensors")]
CNN = os.path.join(ROOT, "graphs/small_cnn.onnx")

# y = x*x + x and z = x * (x*x), x: [batch, 4] f32
SIMPLE = {
    "format": "rlx.graph", "version": 1, "name": "batch_simple",
    "nodes": [
        {"id": "x", "op": "input", "shape": ["batch", 4]},
        {"id": "s", "op": "square", "inputs": ["x"]},
        {"id": "y", "op": "add", "inputs": ["s", "x"]},
        {"id": "z", "op": "mul", "inputs": ["x", "s"]},
    ],
    "outputs": ["y", "z"],
}


def rlx(*args, cwd=None, stdin=None):
    return clitest.rlx(*args, cwd=cwd, stdin=stdin)


def scratch():
    return tempfile.mkdtemp(dir=clitest.S.tmp)


def simple_graph(d):
    p = os.path.join(d, "simple.json")
    with open(p, "w") as f:
        json.dump(SIMPLE, f)
    return p


def write_list(d, items, name="list.jsonl"):
    p = os.path.join(d, name)
    with open(p, "w") as f:
        for it in items:
            f.write((it if isinstance(it, str) else json.dumps(it)) + "\n")
    return p


def results(out_dir, pattern="results*.jsonl"):
    r = []
    for p in sorted(glob.glob(os.path.join(out_dir, pattern))):
        with open(p) as f:
            r += [json.loads(line) for line in f if line.strip()]
    return r


def by_id(rows):
    return {r["id"]: r for r in rows if r.get("id") is not None}


def temporaries(d):
    return [p for p in glob.glob(os.path.join(d, "**", ".*.tmp.*"), recursive=True)]


def make_inputs(d, n, shape_of, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    items = []
    for i in range(n):
        p = os.path.join(d, f"in{i:03d}.npy")
        np.save(p, rng.standard_normal(shape_of(i)).astype(dtype))
        items.append({"id": f"item-{i:03d}", "inputs": {"x": p}})
    return items


def test_equals_alone_and_numpy():
    d = scratch()
    g = simple_graph(d)
    items = make_inputs(d, 7, lambda i: (1 + i % 3, 4))  # three shapes: one plan each
    # The other SPEC forms: '@file.npy', 'file.safetensors:NAME', inline values.
    items[1]["inputs"]["x"] = "@" + items[1]["inputs"]["x"]
    st = os.path.join(d, "t.safetensors")
    v = np.arange(8, dtype=np.float32).reshape(2, 4) / 7 - 0.5
    header = json.dumps({"p3": {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32]}}).encode()
    with open(st, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header + v.tobytes())
    np.save(os.path.join(d, "in_st.npy"), v)
    items.append({"id": "from-safetensors", "inputs": {"x": st + ":p3"}})
    items[-1]["_x"] = os.path.join(d, "in_st.npy")
    np.save(os.path.join(d, "in_inline.npy"), np.array([[1.5, -2, 0.25, 3]], np.float32))
    items.append({"id": "inline", "inputs": {"x": "1x4xf32=1.5,-2,0.25,3"}, "_x": os.path.join(d, "in_inline.npy")})
    lst = write_list(d, [{k: v for k, v in it.items() if k != "_x"} for it in items])
    out = os.path.join(d, "out")
    rc, so, se = rlx("run", g, "--batch", lst, "--out-dir", out)
    check("simple/exit0", rc == 0, se)
    rows = by_id(results(out))
    stdout_rows = [json.loads(l) for l in so.splitlines() if l.strip()]
    check("simple/stdout-lines", len(stdout_rows) == 9 and all(r["status"] == "ok" for r in stdout_rows), so)
    for it in items:
        x = np.load(it.get("_x") or it["inputs"]["x"].lstrip("@"))
        r = rows.get(it["id"], {})
        check(f"simple/{it['id']}/status", r.get("status") == "ok" and isinstance(r.get("ms"), (int, float)), str(r))
        y = np.load(os.path.join(out, it["id"], "y.npy"))
        z = np.load(os.path.join(out, it["id"], "z.npy"))
        check(f"simple/{it['id']}/y-numpy", y.shape == x.shape and np.allclose(y, x * x + x, rtol=1e-6, atol=1e-6))
        check(f"simple/{it['id']}/z-numpy", z.shape == x.shape and np.allclose(z, x * (x * x), rtol=1e-6, atol=1e-6))
    # A model with parameters (graph file) and an ONNX model: each item's outputs equal the
    # same item run alone by `rlx run` in another process, byte for byte.
    for name, model, shape, inp in (("mlp", MLP, lambda i: (1 + i % 2, 16), "x"), ("cnn", [CNN], lambda i: (1, 3, 32, 32), "image")):
        dd = scratch()
        items = make_inputs(dd, 4, shape, seed=3)
        for it in items:
            it["inputs"] = {inp: it["inputs"]["x"]}
        lst = write_list(dd, items)
        out = os.path.join(dd, "out")
        rc, so, se = rlx("run", *model, "--batch", lst, "--out-dir", out)
        check(f"{name}/exit0", rc == 0, se)
        for it in items:
            alone = os.path.join(dd, "alone", it["id"])
            rc, so, se = rlx("run", *model, "-i", f"{inp}=@{it['inputs'][inp]}", "--mode", "compiled", "--out-dir", alone)
            check(f"{name}/{it['id']}/alone-ran", rc == 0, se)
            for f in sorted(os.listdir(alone)):
                a = np.load(os.path.join(alone, f))
                b_path = os.path.join(out, it["id"], f)
                b = np.load(b_path) if os.path.exists(b_path) else None
                check(f"{name}/{it['id']}/{f}/equal-alone", b is not None and a.dtype == b.dtype and np.array_equal(a, b),
                      f"{a} vs {b}")


def test_stacked_batch_size():
    d = scratch()
    g = simple_graph(d)
    items = make_inputs(d, 11, lambda i: (1, 4), seed=5)
    lst = write_list(d, items)
    out = os.path.join(d, "out")
    rc, so, se = rlx("run", g, "--batch", lst, "--out-dir", out, "--batch-size", "4")
    check("stacked/simple/exit0", rc == 0, se)
    rows = by_id(results(out))
    for it in items:
        x = np.load(it["inputs"]["x"])
        y = np.load(os.path.join(out, it["id"], "y.npy"))
        check(f"stacked/simple/{it['id']}", rows.get(it["id"], {}).get("status") == "ok" and y.shape == (1, 4)
              and np.allclose(y, x * x + x, rtol=1e-6, atol=1e-6))
    # ONNX with a symbolic batch dim: stacked outputs agree with the items run alone.
    d = scratch()
    items = make_inputs(d, 9, lambda i: (1, 3, 32, 32), seed=6)
    for it in items:
        it["inputs"] = {"image": it["inputs"]["x"]}
    lst = write_list(d, items)
    rc, so, se = rlx("run", CNN, "--batch", lst, "--out-dir", os.path.join(d, "b8"), "--batch-size", "8")
    check("stacked/cnn/exit0", rc == 0, se)
    for it in items[:3] + items[-2:]:
        alone = os.path.join(d, "alone", it["id"])
        rc, _, se = rlx("run", CNN, "-i", f"image=@{it['inputs']['image']}", "--mode", "compiled", "--out-dir", alone)
        a = np.load(os.path.join(alone, "probs.npy"))
        b = np.load(os.path.join(d, "b8", it["id"], "probs.npy"))
        check(f"stacked/cnn/{it['id']}", rc == 0 and a.shape == b.shape == (1, 10) and np.allclose(a, b, rtol=1e-5, atol=1e-6),
              f"{a}\n{b}")
    # 7 items at --batch-size 4: a stack of 4 (the split learnt from shape inference, no item run
    # alone first), then a short group of 3 padded to 4 with copies of its last item: one plan
    # for the whole job, and every item's output is its own.
    d = scratch()
    items = make_inputs(d, 7, lambda i: (1, 3, 32, 32), seed=8)
    for it in items:
        it["inputs"] = {"image": it["inputs"]["x"]}
    rc, so, se = rlx("run", CNN, "--batch", write_list(d, items), "--out-dir", os.path.join(d, "b4"), "--batch-size", "4",
                     "--verbose")
    check("stacked/cnn-padded-tail/exit0", rc == 0, se)
    plans = [l for l in se.splitlines() if l.startswith("compile #")]
    check("stacked/cnn-padded-tail/one-plan", len(plans) == 1 and "[4, 3, 32, 32]" in se, se)
    for it in items:
        alone = os.path.join(d, "alone", it["id"])
        rc, _, se = rlx("run", CNN, "-i", f"image=@{it['inputs']['image']}", "--mode", "compiled", "--out-dir", alone)
        a = np.load(os.path.join(alone, "probs.npy"))
        b = np.load(os.path.join(d, "b4", it["id"], "probs.npy"))
        check(f"stacked/cnn-padded-tail/{it['id']}", rc == 0 and a.shape == b.shape == (1, 10)
              and np.allclose(a, b, rtol=1e-5, atol=1e-6), f"{a}\n{b}")
    # A graph without a batch dim: --batch-size falls back to one item at a time, still right.
    d = scratch()
    fixed = dict(SIMPLE, nodes=[dict(SIMPLE["nodes"][0], shape=[1, 4])] + SIMPLE["nodes"][1:])
    gf = os.path.join(d, "fixed.json")
    with open(gf, "w") as f:
        json.dump(fixed, f)
    items = make_inputs(d, 5, lambda i: (1, 4), seed=7)
    rc, so, se = rlx("run", gf, "--batch", write_list(d, items), "--out-dir", os.path.join(d, "o"), "--batch-size", "4")
    ok = rc == 0
    for it in items:
        x = np.load(it["inputs"]["x"])
        ok = ok and np.allclose(np.load(os.path.join(d, "o", it["id"], "z.npy")), x * (x * x), rtol=1e-6, atol=1e-6)
    check("stacked/fixed-batch-falls-back", ok, se)


def test_bad_items():
    d = scratch()
    g = simple_graph(d)
    good = make_inputs(d, 3, lambda i: (2, 4))
    np.save(os.path.join(d, "int.npy"), np.ones((2, 4), dtype=np.int32))
    np.save(os.path.join(d, "wide.npy"), np.ones((2, 5), dtype=np.float32))
    np.save(os.path.join(d, "f64.npy"), np.ones((2, 4), dtype=np.float64))
    x0 = good[0]["inputs"]["x"]
    bad = [
        ("missing", {"id": "missing", "inputs": {"x": os.path.join(d, "nope.npy")}}, "does not exist"),
        ("dtype", {"id": "dtype", "inputs": {"x": os.path.join(d, "int.npy")}}, "i32"),
        ("float64", {"id": "float64", "inputs": {"x": os.path.join(d, "f64.npy")}}, "float64"),
        ("shape", {"id": "shape", "inputs": {"x": os.path.join(d, "wide.npy")}}, ""),
        ("unknown-input", {"id": "unk", "inputs": {"q": x0}}, "no such input"),
        ("no-input", {"id": "noin", "inputs": {}}, "no value given for input x"),
        ("hostile-dotdot", {"id": "..", "inputs": {"x": x0}}, "refused"),
        ("hostile-slash", {"id": "../escape", "inputs": {"x": x0}}, "path separator"),
        ("hostile-abs", {"id": "/tmp/abs", "inputs": {"x": x0}}, "path separator"),
        ("hostile-hidden", {"id": ".hidden", "inputs": {"x": x0}}, "starts with '.'"),
        ("hostile-results", {"id": "results.jsonl", "inputs": {"x": x0}}, "results file"),
        ("hostile-control", {"id": "a\u001b[2Jb", "inputs": {"x": x0}}, "control character"),
        ("id-not-string", {"id": 7, "inputs": {"x": x0}}, "\"id\" must be a string"),
        ("malformed", '{"id": "m", "inputs": ', "not valid JSON"),
        ("not-object", "[1, 2]", "expected an object"),
        ("duplicate", {"id": good[0]["id"], "inputs": {"x": x0}}, "also on line 1"),
        ("unknown-key", {"id": "uk", "inputs": {"x": x0}, "input": {}}, "unknown key"),
    ]
    lst = write_list(d, good + [b for _, b, _ in bad])
    out = os.path.join(d, "out")
    rc, so, se = rlx("run", g, "--batch", lst, "--out-dir", out)
    check("bad/exit1", rc == 1, se)
    rows = results(out)
    check("bad/one-line-per-item", len(rows) == len(good) + len(bad), json.dumps(rows, indent=1))
    for i, it in enumerate(good):
        r = rows[i] if i < len(rows) else {}
        check(f"bad/good-{i}-ok", r.get("id") == it["id"] and r.get("status") == "ok", str(r))
    for k, (name, _, why) in enumerate(bad):
        r = rows[len(good) + k] if len(good) + k < len(rows) else {}
        check(f"bad/{name}", r.get("status") == "error" and r.get("line") == len(good) + k + 1 and why in r.get("error", ""), str(r))
    # Nothing was written outside the output directory, nor under a hostile name.
    check("bad/no-escape", not os.path.exists(os.path.join(d, "escape")) and not os.path.exists("/tmp/abs/y.npy")
          and sorted(os.listdir(out)) == sorted([it["id"] for it in good] + ["results.jsonl"]), str(os.listdir(out)))


def test_check_numerics():
    d = scratch()
    g = simple_graph(d)
    items = make_inputs(d, 3, lambda i: (1, 4), seed=21)
    x = np.load(items[1]["inputs"]["x"])
    x[0, 2] = np.inf  # square(inf) = inf: the first node gives a non-finite value
    np.save(items[1]["inputs"]["x"], x)
    lst = write_list(d, items)
    for mode in ("compiled", "eager"):
        out = os.path.join(d, "out-" + mode)
        rc, so, se = rlx("run", g, "--batch", lst, "--out-dir", out, "--check-numerics", "--mode", mode)
        st = [r["status"] for r in results(out)]
        check(f"numerics/{mode}", rc == 1 and st == ["ok", "error", "ok"] and not os.path.exists(os.path.join(out, items[1]["id"], "y.npy")),
              f"{st}\n{se}")
    rc, so, se = rlx("run", g, "--batch", lst, "--out-dir", os.path.join(d, "unchecked"))
    check("numerics/unchecked-ok", rc == 0, se)


def test_symlinked_item_dir_not_followed():
    d = scratch()
    g = simple_graph(d)
    items = make_inputs(d, 2, lambda i: (1, 4))
    out = os.path.join(d, "out")
    outside = os.path.join(d, "outside")
    os.makedirs(out)
    os.makedirs(outside)
    os.symlink(outside, os.path.join(out, items[0]["id"]))
    rc, so, se = rlx("run", g, "--batch", write_list(d, items), "--out-dir", out)
    st = [r["status"] for r in results(out)]
    err = (results(out) or [{}])[0].get("error", "")
    check("symlink/item-dir-refused", rc == 1 and st == ["error", "ok"] and "symbolic link is not followed" in err and os.listdir(outside) == [],
          f"{st} {err} {os.listdir(outside)}")


def test_exit_codes_and_usage():
    d = scratch()
    g = simple_graph(d)
    items = make_inputs(d, 2, lambda i: (1, 4))
    lst = write_list(d, items)
    out = os.path.join(d, "out")
    cases = [
        ("no-out-dir", ["run", g, "--batch", lst], "--out-dir"),
        ("with-input", ["run", g, "--batch", lst, "--out-dir", out, "-i", "x=random"], "--input"),
        ("with-json", ["run", g, "--batch", lst, "--out-dir", out, "--json"], "--json"),
        ("shard-range", ["run", g, "--batch", lst, "--out-dir", out, "--shard", "4/4"], "--shard"),
        ("shard-form", ["run", g, "--batch", lst, "--out-dir", out, "--shard", "1"], "--shard"),
        ("list-missing", ["run", g, "--batch", os.path.join(d, "none.jsonl"), "--out-dir", out], "none.jsonl"),
        ("list-dir", ["run", g, "--batch", d, "--out-dir", out], "directory"),
        ("batch-size-alone", ["run", g, "--batch-size", "4"], "--batch-size"),
        ("force-alone", ["run", g, "--force", "-i", "x=random", "--dim", "batch=1"], "--force"),
        ("batch-size-zero", ["run", g, "--batch", lst, "--out-dir", out, "--batch-size", "0"], "--batch-size"),
        ("model-missing", ["run", os.path.join(d, "nope.json"), "--batch", lst, "--out-dir", out], "nope.json"),
        ("out-dir-file", ["run", g, "--batch", lst, "--out-dir", lst], "not a directory"),
    ]
    for name, args, word in cases:
        rc, so, se = rlx(*args)
        check(f"usage/{name}", rc == 2 and word in se, f"rc={rc}\n{se}")
    rc, so, se = rlx("run", g, "--batch", lst, "--out-dir", out)
    check("exit/all-ok-0", rc == 0, se)
    rc, so, se = rlx("run", g, "--batch", write_list(d, items + [{"id": "bad", "inputs": {}}], "l2.jsonl"), "--out-dir", out)
    check("exit/some-failed-1", rc == 1, se)
    # An empty list is a job with nothing to do.
    rc, so, se = rlx("run", g, "--batch", write_list(d, [], "empty.jsonl"), "--out-dir", os.path.join(d, "e"))
    check("exit/empty-0", rc == 0 and results(os.path.join(d, "e")) == [], se)


def test_resume_force_max_errors():
    d = scratch()
    g = simple_graph(d)
    items = make_inputs(d, 6, lambda i: (2, 4))
    lst = write_list(d, items)
    out = os.path.join(d, "out")
    rc, _, se = rlx("run", g, "--batch", lst, "--out-dir", out)
    check("resume/first", rc == 0, se)
    # Rerun: every item skipped; a removed output and a short one are redone.
    os.remove(os.path.join(out, items[1]["id"], "z.npy"))
    zp = os.path.join(out, items[4]["id"], "y.npy")
    data = open(zp, "rb").read()
    with open(zp, "wb") as f:
        f.write(data[: len(data) - 8])
    rc, so, se = rlx("run", g, "--batch", lst, "--out-dir", out)
    rows = [json.loads(l) for l in so.splitlines()]
    st = {r["id"]: r["status"] for r in rows}
    want = {it["id"]: "ok" if i in (1, 4) else "skipped" for i, it in enumerate(items)}
    check("resume/skipped-and-redone", rc == 0 and st == want, so)
    for i in (1, 4):
        x = np.load(items[i]["inputs"]["x"])
        check(f"resume/redone-{i}-right", np.allclose(np.load(os.path.join(out, items[i]["id"], "y.npy")), x * x + x, rtol=1e-6)
              and np.allclose(np.load(os.path.join(out, items[i]["id"], "z.npy")), x * (x * x), rtol=1e-6))
    check("resume/results-appended", len(results(out)) == 12, str(len(results(out))))
    rc, so, se = rlx("run", g, "--batch", lst, "--out-dir", out, "--force")
    check("resume/force", rc == 0 and [json.loads(l)["status"] for l in so.splitlines()] == ["ok"] * 6, so)
    # --max-errors 2: the job stops at the second failed item.
    lst2 = write_list(d, [items[0], {"id": "e1", "inputs": {}}, items[1], {"id": "e2", "inputs": {}}, {"id": "e3", "inputs": {}},
                          items[2]], "l2.jsonl")
    out2 = os.path.join(d, "out2")
    rc, so, se = rlx("run", g, "--batch", lst2, "--out-dir", out2, "--max-errors", "2")
    ids = [r["id"] for r in results(out2)]
    check("max-errors/stops", rc == 1 and ids == [items[0]["id"], "e1", items[1]["id"], "e2"] and "--max-errors" in se, f"{ids}\n{se}")


def test_gnu_parallel_shards():
    if not shutil.which("parallel"):
        check("parallel/installed", False, "GNU parallel is not installed (scripts/setup.sh installs it)")
        return
    d = scratch()
    g = simple_graph(d)
    items = make_inputs(d, 23, lambda i: (1 + i % 2, 4), seed=9)
    lst = write_list(d, items)
    out = os.path.join(d, "out")
    r = subprocess.run(["parallel", "--will-cite", "-j", "4", clitest.rlx_path(), "run", g, "--batch", lst, "--out-dir", out, "--shard", "{}/4",
                        ":::", "0", "1", "2", "3"], capture_output=True, text=True, timeout=300)
    check("parallel/exit0", r.returncode == 0, r.stderr)
    rows = results(out)
    ids = [r["id"] for r in rows]
    check("parallel/every-item-once", sorted(ids) == sorted(it["id"] for it in items), str(sorted(ids)))
    check("parallel/four-results-files", sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "results*.jsonl")))
          == [f"results.{i}-of-4.jsonl" for i in range(4)])
    # Shard I takes the lines whose 0-based index is I mod 4.
    for i in range(4):
        got = sorted(r["id"] for r in results(out, f"results.{i}-of-4.jsonl"))
        check(f"parallel/shard-{i}-lines", got == sorted(it["id"] for k, it in enumerate(items) if k % 4 == i), str(got))
    ok = True
    for it in items:
        x = np.load(it["inputs"]["x"])
        ok = ok and np.allclose(np.load(os.path.join(out, it["id"], "y.npy")), x * x + x, rtol=1e-6)
    check("parallel/outputs-right", ok)


def test_sigkill_then_rerun():
    d = scratch()
    items = make_inputs(d, 500, lambda i: (4, 16), seed=11)
    lst = write_list(d, items)
    clean = os.path.join(d, "clean")
    rc, _, se = rlx("run", *MLP, "--batch", lst, "--out-dir", clean)
    check("kill/clean-run", rc == 0, se)
    out = os.path.join(d, "out")
    p = subprocess.Popen([clitest.rlx_path(), "run", *MLP, "--batch", lst, "--out-dir", out, "--force"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    seen = 0
    for line in p.stdout:
        seen += 1
        if seen == 10:
            p.send_signal(signal.SIGKILL)
            break
    p.wait(timeout=60)
    done = len(results(out))
    check("kill/killed-midway", p.returncode == -signal.SIGKILL and 10 <= done < len(items),
          f"rc={p.returncode}, {done} of {len(items)} items done before the kill landed")
    # A temporary as a write killed midway leaves it, planted deterministically too.
    victim = os.path.join(out, items[200]["id"])
    os.makedirs(victim, exist_ok=True)
    with open(os.path.join(victim, ".y.npy.tmp.Ab12Cd"), "wb") as f:
        f.write(b"\x93NUMPY partial")
    rc, so, se = rlx("run", *MLP, "--batch", lst, "--out-dir", out)
    rows = [json.loads(l) for l in so.splitlines()]
    check("kill/rerun-ok", rc == 0 and len(rows) == len(items) and {r["status"] for r in rows} <= {"ok", "skipped"}
          and sum(r["status"] == "skipped" for r in rows) >= 10, se)
    same = True
    for it in items:
        for f in os.listdir(os.path.join(clean, it["id"])):
            a = open(os.path.join(clean, it["id"], f), "rb").read()
            bp = os.path.join(out, it["id"], f)
            same = same and os.path.exists(bp) and open(bp, "rb").read() == a
    check("kill/byte-identical", same)
    check("kill/no-temporaries", temporaries(out) == [], str(temporaries(out)))


def test_worker_through_pipe():
    d = scratch()
    g = simple_graph(d)
    items = make_inputs(d, 3, lambda i: (1, 4), seed=13)
    out = os.path.join(d, "out")
    p = subprocess.Popen([clitest.rlx_path(), "run", g, "--batch", "-", "--out-dir", out], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, bufsize=1)
    got = []
    for it in items + [{"id": "w-bad", "inputs": {"x": os.path.join(d, "none.npy")}}]:
        p.stdin.write(json.dumps(it) + "\n")
        p.stdin.flush()
        ready, _, _ = select.select([p.stdout], [], [], 120)
        line = p.stdout.readline() if ready else ""
        got.append(json.loads(line) if line.strip() else {})
        check(f"worker/{it['id']}/answered-before-close", got[-1].get("id") == it["id"], line)
    p.stdin.close()
    rc = p.wait(timeout=60)
    check("worker/statuses", [r.get("status") for r in got] == ["ok", "ok", "ok", "error"], str(got))
    check("worker/exit1-after-close", rc == 1, p.stderr.read())
    # --max-errors ends a worker whose standard input is still open.
    q = subprocess.Popen([clitest.rlx_path(), "run", g, "--batch", "-", "--out-dir", out, "--max-errors", "1"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    q.stdin.write("{not json\n")
    q.stdin.flush()
    try:
        rc = q.wait(timeout=60)
    except subprocess.TimeoutExpired:
        q.kill()
        rc = None
    check("worker/max-errors-with-stdin-open", rc == 1, str(rc))
    q.stdin.close()
    x = np.load(items[2]["inputs"]["x"])
    check("worker/output", np.allclose(np.load(os.path.join(out, items[2]["id"], "y.npy")), x * x + x, rtol=1e-6))


def test_progress_only_on_a_terminal():
    import pty
    d = scratch()
    g = simple_graph(d)
    lst = write_list(d, make_inputs(d, 5, lambda i: (1, 4)))
    master, slave = pty.openpty()
    p = subprocess.Popen([clitest.rlx_path(), "run", g, "--batch", lst, "--out-dir", os.path.join(d, "tty")], stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    p.stdout.read()
    p.wait(timeout=60)
    err = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        err += chunk
    os.close(master)
    text = err.decode(errors="replace")
    check("progress/terminal", p.returncode == 0 and "5 done of 5" in text and "items/s" in text and "0 failed" in text, text)
    # A list that is a named pipe (as `--batch <(make_list)` gives) is read once, progress bar or not.
    fifo = os.path.join(d, "list.fifo")
    os.mkfifo(fifo)
    master, slave = pty.openpty()
    p = subprocess.Popen([clitest.rlx_path(), "run", g, "--batch", fifo, "--out-dir", os.path.join(d, "fifo")], stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    with open(fifo, "w") as f:
        f.write(open(lst).read())
    out = p.stdout.read().decode()
    p.wait(timeout=60)
    try:
        while os.read(master, 4096):
            pass
    except OSError:
        pass
    os.close(master)
    check("progress/fifo-list", p.returncode == 0 and [json.loads(l)["status"] for l in out.splitlines()] == ["ok"] * 5, out)
    rc, so, se = rlx("run", g, "--batch", lst, "--out-dir", os.path.join(d, "pipe"))
    check("progress/not-a-terminal", rc == 0 and "items/s" not in se and "\r" not in se and "batch: 5 ok" in se, se)


if __name__ == "__main__":
    sys.exit(clitest.main("batch tests", globals()))
