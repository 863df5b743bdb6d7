#!/usr/bin/env python3
"""Runs every golden case (tests/golden/*/case.json) through `rlx run --expect` in the
given modes; extra arguments go to every run. The check each CPU performance change
in bench/ and lib/backends/cpu was held to:
    python3 bench/check_goldens_all_modes.py build-bench/apps/rlx/rlx eager,lazy,compiled
    RLX_CPU_ISA=base python3 bench/check_goldens_all_modes.py build-bench/apps/rlx/rlx compiled --repeat 3
"""
import json, os, subprocess, sys, glob
rlx = sys.argv[1]; modes = sys.argv[2].split(','); extra = sys.argv[3:]
fails = 0; n = 0
for cj in sorted(glob.glob('tests/golden/*/case.json')):
    d = os.path.dirname(cj); c = json.load(open(cj))
    args = [rlx, 'run', os.path.join(d, c['graph'])]
    for p in c['params']: args += ['--params', os.path.join(d, p)]
    for k, v in c['inputs'].items(): args += ['--input', f'{k}=@{os.path.join(d, v)}']
    for k, v in c['expected'].items(): args += ['--expect', f'{k}=@{os.path.join(d, v)}']
    args += ['--atol', str(c['atol']), '--rtol', str(c['rtol'])] + extra
    for m in modes:
        n += 1
        r = subprocess.run(args + ['--mode', m], capture_output=True, text=True)
        if r.returncode != 0:
            fails += 1
            print(f'FAIL {d} {m} rc={r.returncode}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""}')
print(f'{n - fails} passed, {fails} failed')
sys.exit(1 if fails else 0)
