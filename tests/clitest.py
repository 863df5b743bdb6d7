"""The harness shared by rlx's Python command-line tests (tests/cli_scripts.py,
tests/onnx/cli_tests.py, tests/onnx/hostile_tests.py, ...).

A test script defines functions named test_*, each calling `check`/`expect_rc`, and ends with

    if __name__ == "__main__":
        sys.exit(clitest.main("ONNX CLI tests", globals()))

`main` takes `--rlx PATH` (the binary under test) and `-k SUBSTRING` (run the test_* functions
whose name contains it), runs them in a fresh temporary directory (`path(name)` names a file in
it), prints one FAIL block per failed check and a summary line, and returns 1 when any check
failed. A check that cannot run here (no Vulkan in this build) is recorded with `skip`, printed
and counted apart: it is never counted as passed.
"""
import argparse
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _State:
    rlx = None    # absolute path of the rlx binary
    tmp = None    # the run's temporary directory
    runs = 0
    fails = []
    skips = []


S = _State()


def rlx_path():
    return S.rlx


def path(name):
    """A file name inside this run's temporary directory."""
    return os.path.join(S.tmp, name)


def rlx(*args, cwd=None, env=None, timeout=300, stdin=None):
    """Runs rlx with `args`; returns (exit code, stdout, stderr)."""
    r = subprocess.run([S.rlx] + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                       env=env, input=stdin)
    return r.returncode, r.stdout, r.stderr


def check(name, cond, detail=""):
    S.runs += 1
    if not cond:
        S.fails.append(name)
        print(f"FAIL {name}\n{detail}")
    return bool(cond)


def skip(name, why):
    S.skips.append(f"{name}: {why}")
    print(f"SKIP {name}: {why}")


def expect_rc(name, args, rc, *phrases, cwd=None):
    """Runs rlx and checks its exit code and that stderr holds every phrase (None: no phrase)."""
    phrases = [p for p in phrases if p is not None]
    got, out, err = rlx(*args, cwd=cwd)
    if os.environ.get("RLX_TESTS_VERBOSE"):
        print(f"{name}: exit {got}: {err.strip().splitlines()[-1] if err.strip() else ''}")
    check(name, got == rc and all(p in err for p in phrases),
          f"  rlx {' '.join(map(str, args))}\n  exit {got} (want {rc}), want phrases {phrases!r}\n"
          f"  stdout: {out.strip()[:400]}\n  stderr: {err.strip()[:800]}")
    return got, out, err


def save(model, name):
    """Writes a protobuf message (an onnx.ModelProto) to path(name); returns that path."""
    p = path(name)
    with open(p, "wb") as f:
        f.write(model.SerializeToString())
    return p


def main(title, tests):
    """Runs the test_* functions of `tests` (a script's globals()); returns the exit code."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", required=True)
    ap.add_argument("-k", default="")
    a = ap.parse_args()
    S.rlx = os.path.abspath(a.rlx)
    with tempfile.TemporaryDirectory(prefix="rlx-tests-") as t:
        S.tmp = t
        for name, fn in list(tests.items()):
            if name.startswith("test_") and callable(fn) and a.k in name:
                fn()
    return finish(title)


def finish(title):
    """Prints the summary line; returns the exit code (1 when any check failed). For scripts with a
    main of their own, which set S.rlx and S.tmp themselves."""
    summary = f"{title}: {S.runs - len(S.fails)} of {S.runs} checks passed"
    if S.skips:
        summary += f", {len(S.skips)} skipped (listed above)"
    print(summary)
    return 1 if S.fails else 0


def backends(rlx_binary):
    """["cpu"], plus "vulkan" where `rlx devices` lists a Vulkan device (the sanitizer build has none)."""
    out = subprocess.run([rlx_binary, "devices"], capture_output=True, text=True).stdout
    return ["cpu"] + (["vulkan"] if "vulkan device 0" in out else [])


def write_graph(d, name, nodes, outputs):
    """An rlx JSON graph of `nodes` and `outputs`, written as d/NAME.json; returns its path."""
    p = os.path.join(d, name + ".json")
    with open(p, "w") as f:
        json.dump({"format": "rlx.graph", "version": 1, "name": name, "nodes": nodes, "outputs": outputs}, f)
    return p


def run_graph(rlx_binary, graph, inputs, outputs, backend, mode, d, env=None, extra=()):
    """`rlx run GRAPH --backend B --mode M`, each of `inputs` ({name: array}) saved as d/in_NAME.npy and
    passed by --input, each of `outputs` written by --output to d/out_NAME_B_M.npy; `env` adds to the
    environment, `extra` to the arguments. Returns ({output: array}, process), or (None, process)
    when rlx exited non-zero."""
    import numpy as np  # only the scripts that use run_graph need NumPy

    args = [rlx_binary, "run", graph, "--backend", backend, "--mode", mode]
    for k, v in inputs.items():
        p = os.path.join(d, "in_" + k + ".npy")
        np.save(p, v)
        args += ["--input", k + "=@" + p]
    outs = {k: os.path.join(d, "out_%s_%s_%s.npy" % (k, backend, mode)) for k in outputs}
    for k, f in outs.items():
        args += ["--output", k + "=" + f]
    p = subprocess.run(args + list(extra), capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    if p.returncode != 0:
        return None, p
    return {k: np.load(f) for k, f in outs.items()}, p
