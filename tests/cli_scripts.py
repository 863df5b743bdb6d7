#!/usr/bin/python3
"""Issue 21: output that scripts can trust, and examples that run.

  tests/cli_scripts.py --rlx build/apps/rlx/rlx [-k SUBSTRING]

- every example of the README's CLI section ("## Using rlx" up to "## Documentation") and of
  every `rlx COMMAND --help` runs and exits 0, in a scratch directory that sees the repository's
  graphs/, tests/ and bench/. The README's shorthand `rlx run ...` stands for the MLP example's
  arguments (MLP_ARGS below). A Vulkan example on a machine without Vulkan is reported as
  SKIP with the reason, never passed silently;
- `--json`: stdout is one JSON document with --dump-plan, with a failed --expect (its "message"
  says why), above 4,096 elements ("first_values", "numel"), and on errors ({"ok": false, ...});
- float64 .npy, inspect without --dim and with --json, --profile of one run.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

import clitest
from clitest import ROOT, check, rlx, skip

MLP_ARGS = "graphs/mlp.json -p graphs/mlp.safetensors -i x=@graphs/mlp.inputs/x.npy"


def loads(text):
    try:
        return json.loads(text)
    except ValueError:
        return {}


def scratch():
    d = tempfile.mkdtemp(dir=clitest.S.tmp)
    for sub in ("graphs", "tests", "bench"):
        os.symlink(os.path.join(ROOT, sub), os.path.join(d, sub))
    return d


def shell_commands(text):
    """The rlx command lines of a shell snippet: continuations joined, comments dropped."""
    cmds, cur = [], ""
    for line in text.splitlines():
        line = line.rstrip()
        if cur:
            cur += " " + line.strip()
        elif re.match(r"^\s*(RLX_[A-Z_]+=\S+\s+)*rlx\s", line):
            cur = line.strip()
        else:
            continue
        if cur.endswith("\\"):
            cur = cur[:-1].rstrip()
            continue
        # a trailing "# comment" (outside quotes: the examples quote no '#')
        cur = re.sub(r"\s+#.*$", "", cur)
        cmds.append(cur)
        cur = ""
    return cmds


def readme_examples():
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text.split("## Using rlx", 1)[1].split("## Documentation", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [c for b in blocks for c in shell_commands(b)]


def help_examples():
    cmds = []
    rc, out, _ = rlx("completion", "commands")  # every subcommand, one "NAME<TAB>DESCRIPTION" line each
    subs = [line.split("\t", 1)[0] for line in out.splitlines() if line.strip()]
    check("help/subcommands-listed", rc == 0 and {"run", "convert", "generate", "completion"} <= set(subs), out)
    for sub in subs:
        rc, out, err = rlx(sub, "--help")
        check(f"help/{sub}-exits-0", rc == 0, err)
        cmds += [(sub, c) for c in shell_commands(out)]
    return cmds


def run_example(name, cmd):
    d = scratch()
    full = cmd.replace("rlx run ...", f"rlx run {MLP_ARGS}")
    env = dict(os.environ, PATH=os.path.dirname(clitest.rlx_path()) + os.pathsep + os.environ["PATH"], RLX_CACHE_DIR=os.path.join(d, "cache"))
    r = subprocess.run(["bash", "-c", full], capture_output=True, text=True, timeout=300, cwd=d, env=env)
    if r.returncode != 0 and "vulkan" in full and "without the Vulkan executor" in r.stderr + r.stdout:
        skip(name, f"{cmd}: no Vulkan in this build")
        return
    check(name, r.returncode == 0, f"  $ {full}\n  exit {r.returncode}\n  stderr: {r.stderr.strip()[-1200:]}")


def test_examples_run():
    ex = readme_examples()
    check("examples/readme-found", len(ex) >= 25, f"  only {len(ex)} README examples found")
    for i, c in enumerate(ex):
        run_example(f"examples/readme/{i}", c)
    hx = help_examples()
    check("examples/help-found", len(hx) >= 6, f"  only {len(hx)} --help examples found")
    for i, (sub, c) in enumerate(hx):
        run_example(f"examples/help/{sub}/{i}", c)


def test_json_stdout_is_one_document():
    d = scratch()
    rc, out, err = rlx("run", *MLP_ARGS.split(), "--json", "--dump-plan", cwd=d)
    try:
        j = json.loads(out)
    except ValueError as e:
        j = None
        check("json/dump-plan-keeps-stdout-json", False, f"  stdout is not one JSON document ({e}):\n{out[:600]}")
    if j is not None:
        check("json/dump-plan-keeps-stdout-json", rc == 0 and j["ok"] is True and j["exit_code"] == 0)
        check("json/dump-plan-on-stderr", "buffer" in err.lower() or "kernel" in err.lower(), err[:400])
    # A failed --expect: shape mismatch and worst element, in the JSON and on stderr.
    np.save(os.path.join(d, "wrong_shape.npy"), np.zeros((2, 8), np.float32))
    rc, out, err = rlx("run", *MLP_ARGS.split(), "--json", "--expect", "y=@wrong_shape.npy", cwd=d)
    j = loads(out)
    e = (j.get("expect") or [{}])[0]
    check("json/expect-shape-mismatch-says-why",
          rc == 1 and j.get("ok") is False and j.get("exit_code") == 1 and e.get("ok") is False and e.get("shape_ok") is False
          and e.get("shape") == [3, 8] and e.get("expected_shape") == [2, 8]
          and "shape mismatch: got [3, 8], expected [2, 8]" in e.get("message", ""),
          json.dumps(j.get("expect"))[:600])
    _, out0, _ = rlx("run", *MLP_ARGS.split(), "--json", cwd=d)
    y = np.array(json.loads(out0)["outputs"][0]["values"], np.float32).reshape(3, 8)
    y[1, 5] += 1.0
    np.save(os.path.join(d, "off_by_one.npy"), y)
    rc, out, err = rlx("run", *MLP_ARGS.split(), "--json", "--expect", "y=@off_by_one.npy", cwd=d)
    e = (loads(out).get("expect") or [{}])[0]
    check("json/expect-worst-element", rc == 1 and "1 of 24 elements differ; worst at [1, 5]" in e.get("message", "")
          and "worst at [1, 5]" in err, f"{e}\n{err}")
    # Above 4,096 elements: first_values, numel.
    np.save(os.path.join(d, "big.npy"), np.arange(4100 * 16, dtype=np.float32).reshape(4100, 16) / 1e4)
    rc, out, _ = rlx("run", "graphs/mlp.json", "-p", "graphs/mlp.safetensors", "-i", "x=@big.npy", "--json", cwd=d)
    o = (loads(out).get("outputs") or [{}])[0]
    check("json/first-values-above-4096", rc == 0 and "values" not in o and len(o.get("first_values", [])) == 4096
          and o.get("numel") == 4100 * 8,
          str({k: v for k, v in o.items() if k != "first_values"}))
    rc, out, _ = rlx("run", *MLP_ARGS.split(), "--json", cwd=d)
    o = (loads(out).get("outputs") or [{}])[0]
    check("json/values-up-to-4096", len(o.get("values", [])) == 24 and o.get("numel") == 24 and "first_values" not in o)
    # Errors: one JSON object on stdout, the same exit code, the message on stderr as before.
    for name, args, code, phrase in (
            ("missing-file", ["run", "graphs/mlp.json", "-p", "graphs/mlp.safetensors", "-i", "x=@nope.npy", "--json"], 2, "nope.npy"),
            ("unknown-flag", ["run", "graphs/mlp.json", "--jsn", "--json"], 2, "--jsn"),
            ("bad-graph", ["run", "tests/golden/bad/cycle.json", "--json"], 2, "cycle"),
            ("inspect", ["inspect", "nope.json", "--json"], 2, "nope.json")):
        rc, out, err = rlx(*args, cwd=d)
        j = loads(out)
        check(f"json/error-is-json/{name}", rc == code and j.get("ok") is False and j.get("exit_code") == code
              and phrase in j.get("error", "") and "error: " in err, f"  exit {rc}\n  stdout: {out[:400]}\n  stderr: {err[:400]}")
    rc, out, err = rlx("run", "graphs/mlp.json", "-i", "x=@nope.npy", cwd=d)
    check("json/no-json-without-flag", rc == 2 and out == "", out)


def test_float64_npy():
    d = scratch()
    np.save(os.path.join(d, "x64.npy"), np.ones((3, 16), np.float64))
    rc, out, err = rlx("run", *MLP_ARGS.split()[:3], "-i", "x=@x64.npy", cwd=d)
    check("npy/float64-refused-saying-how-to-convert", rc == 2 and "'<f8'" in err and "not narrowed" in err and "astype(np.float32)" in err, err)


def test_inspect():
    d = scratch()
    rc, out, err = rlx("inspect", "graphs/small_cnn.onnx", cwd=d)
    check("inspect/onnx-without-dim-shows-symbolic-shapes",
          rc == 0 and "image [batch, 3, 32, 32] f32" in out and "--dim NAME=SIZE" in out and "batch" in out, out + err)
    rc, out, err = rlx("inspect", "graphs/small_cnn.onnx", "--json", cwd=d)
    j = loads(out) if rc == 0 else {}
    check("inspect/onnx-json-symbolic", j.get("inputs") == [{"name": "image", "shape": ["batch", 3, 32, 32], "dtype": "f32"}]
          and j.get("unbound_dims") == ["batch"], out + err)
    rc, out, err = rlx("inspect", "graphs/small_cnn.onnx", "--dim", "batch=2", "--json", cwd=d)
    j = loads(out) if rc == 0 else {}
    check("inspect/onnx-json-bound", j.get("outputs") == [{"name": "probs", "shape": [2, 10], "dtype": "f32"}]
          and j.get("flops", 0) > 0 and j.get("unbound_dims") == [], out + err)
    rc, out, err = rlx("inspect", "graphs/mlp.json", "--json", cwd=d)
    j = loads(out) if rc == 0 else {}
    check("inspect/rlx-json-symbolic", j.get("inputs") == [{"name": "x", "shape": ["batch", 16], "dtype": "f32"}]
          and j.get("unbound_dims") == ["batch"] and j.get("parameters", {}).get("values") == 32 * 16 + 32 + 8 * 32 + 8, out + err)
    rc, out, err = rlx("inspect", "graphs/mlp.json", "--dim", "batchh=2", cwd=d)
    check("inspect/unknown-dim", rc == 2 and "has no symbolic dimension 'batchh' (its dimensions: batch)" in err, err)


def test_version():
    # `rlx --version`: version, commit and build type; with --verbose the CPU's kernels and the devices.
    rc, out, err = rlx("--version")
    check("version/line", rc == 0 and re.match(r"^rlx \d+\.\d+\.\d+ \(commit [0-9a-f]{12}(-dirty)?, \w+ build, ", out) is not None, out + err)
    rc, out, err = rlx("--version", "--verbose")
    check("version/verbose", rc == 0 and all(w in out for w in ("cpu device 0:", "int8 products", "cpu features")), out + err)


def test_profile_says_cold():
    d = scratch()
    rc, out, err = rlx("run", *MLP_ARGS.split(), "--profile", cwd=d)
    check("profile/one-run-says-cold", rc == 0 and "cold" in err and "--repeat" in err, err)
    rc, out, err = rlx("run", *MLP_ARGS.split(), "--profile", "--repeat", "3", cwd=d)
    check("profile/repeat-no-cold-note", rc == 0 and "timed the only run" not in err, err)



def test_profile_through_host_steps():
    # A graph with a data-dependent op runs as segments around a host step (docs/modes.md); --profile
    # lists the kernels of every segment, before and after it, not only the outer plan's (none).
    d = scratch()
    g = {"format": "rlx.graph", "version": 1, "name": "nz", "nodes": [
        {"id": "x", "op": "input", "shape": [4], "dtype": "f32"},
        {"id": "sq", "op": "mul", "inputs": ["x", "x"]},
        {"id": "n", "op": "nonzero", "inputs": ["sq"]},
        {"id": "idx", "op": "result", "inputs": ["n"], "attrs": {"index": 0}, "shape": [1, 2], "dtype": "i64"},
        {"id": "idxf", "op": "cast", "inputs": ["idx"], "attrs": {"dtype": "f32"}},
        {"id": "y", "op": "add", "inputs": ["idxf", "idxf"]}], "outputs": ["y"]}
    gp = os.path.join(d, "nz.json")
    with open(gp, "w") as f:
        json.dump(g, f)
    rc, out, err = rlx("run", gp, "-i", "x=4xf32=0,1,0,2", "--profile", "--json", cwd=d)
    m = re.search(r"total over (\d+) kernels", err)
    # y = 2 * (indices of x's nonzero elements), computed here: [[2, 6]]
    y = next((o["values"] for o in json.loads(out)["outputs"] if o["name"] == "y"), None) if rc == 0 else None
    check("profile/host-step-segments", rc == 0 and m is not None and int(m.group(1)) >= 2 and "node 'sq'" in err
          and "node 'y'" in err, err)
    check("profile/host-step-result", y is not None and np.array_equal(np.array(y).reshape(-1), [2, 6]), out)


if __name__ == "__main__":
    sys.exit(clitest.main("CLI script tests", globals()))
