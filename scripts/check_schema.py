#!/usr/bin/python3
"""Validates every example and golden graph against docs/graph-format.schema.json,
so that the published schema stays true to what the loader accepts."""
import glob, json, os, sys

import jsonschema

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
schema = json.load(open(os.path.join(root, "docs/graph-format.schema.json")))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)
files = sorted(glob.glob(os.path.join(root, "graphs/*.json")) + glob.glob(os.path.join(root, "tests/golden/*/graph.json"))
               + glob.glob(os.path.join(root, "bench/graphs/*.json")))
bad = 0
for f in files:
    errors = list(validator.iter_errors(json.load(open(f))))
    if errors:
        bad += 1
        print(f"{os.path.relpath(f, root)}: {errors[0].message[:200]}")
# Structural refusals the schema can express must be refused by it too.
for name in ["unknown_attr.json", "wrong_attr_type.json", "unknown_dtype.json", "missing_format.json", "bad_version.json"]:
    g = json.load(open(os.path.join(root, "tests/golden/bad", name)))
    if validator.is_valid(g):
        bad += 1
        print(f"tests/golden/bad/{name}: accepted by the schema")
print(f"schema: {len(files) + 5 - bad} passed, {bad} failed")
sys.exit(1 if bad else 0)
