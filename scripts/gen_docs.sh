#!/usr/bin/env bash
# Regenerates what the op registry documents: the op tables of docs/graph-format.md (between
# their "generated" markers) and docs/graph-format.schema.json. Builds first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
RLX_UPDATE_DOCS=1 build/tests/test_ops --gtest_filter='OpsDocs.TablesAndSchemaAreGeneratedFromTheRegistry'
git diff --stat -- docs/graph-format.md docs/graph-format.schema.json || true
