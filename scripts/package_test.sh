#!/usr/bin/env bash
# Installing rlx like any command-line tool (issue 32), checked from a built tree
# (scripts/build.sh first; scripts/test.sh runs this as a stage):
#   1. `cpack -G DEB` builds the package; lintian finds no error and no warning in it; its
#      Depends name OpenBLAS (opened with dlopen, so not found by dpkg-shlibdeps) and its
#      Recommends the Vulkan loader and oneDNN;
#   2. the package is unpacked into a temporary root (`dpkg -x`) and the installed binary runs
#      the golden suite in every mode from a directory outside the checkout that holds only
#      the goldens' data (on Vulkan too, where this machine has a device);
#   3. every subcommand has its man page, and each page is the page of that command;
#   4. the installed bash completion completes subcommands, flags and their values;
#   5. `cmake --install --prefix DIR` installs the same files as the package.
#   scripts/package_test.sh [BUILD_DIR]     (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=$(cd "${1:-build}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "package_test: FAIL: $*" >&2; exit 1; }
step() { printf 'package_test: %s\n' "$*"; }

step "cpack -G DEB"
(cd "$BUILD_DIR" && cpack -G DEB -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log"; fail "cpack"; }
deb=$(ls "$tmp"/pkg/rlx_*.deb)
step "lintian $(basename "$deb")"
lintian --fail-on error,warning "$deb" 2> >(grep -v "running with root privileges" >&2) || fail "lintian reported errors or warnings"
dpkg-deb -f "$deb" Depends | grep -q "libopenblas0" || fail "Depends lacks OpenBLAS: $(dpkg-deb -f "$deb" Depends)"
dpkg-deb -f "$deb" Recommends | grep -q "libvulkan1" || fail "Recommends lacks the Vulkan loader"
dpkg-deb -f "$deb" Recommends | grep -q "libdnnl2" || fail "Recommends lacks oneDNN"

dpkg -x "$deb" "$tmp/root"
rlx=$tmp/root/usr/bin/rlx
"$rlx" --version | grep -Eq '^rlx [0-9]+\.[0-9]+\.[0-9]+ \(commit [0-9a-f]{12}' || fail "--version: $("$rlx" --version)"

step "golden suite with the installed binary, outside the checkout"
mkdir -p "$tmp/work/tests"
cp -r "$ROOT/tests/golden" "$tmp/work/tests/"
cp -r "$ROOT/graphs" "$tmp/work/"  # some cases name the example graphs (../../../graphs/...)
(cd "$tmp/work" && env -u RLX_SOURCE_DIR RLX_CACHE_DIR="$tmp/cache" RLX_CACHE_SECRET=package-test \
   /usr/bin/python3 "$ROOT/bench/check_goldens_all_modes.py" "$rlx" eager,lazy,compiled | tail -1) | tee "$tmp/goldens.txt"
grep -q " 0 failed" "$tmp/goldens.txt" || fail "goldens on the CPU"
if "$rlx" devices --backend vulkan 2>/dev/null | grep -q "vulkan device 0"; then
  (cd "$tmp/work" && env -u RLX_SOURCE_DIR RLX_CACHE_DIR="$tmp/cache" RLX_CACHE_SECRET=package-test \
     /usr/bin/python3 "$ROOT/bench/check_goldens_all_modes.py" "$rlx" lazy --backend vulkan | tail -1) | tee "$tmp/goldens_vk.txt"
  grep -q " 0 failed" "$tmp/goldens_vk.txt" || fail "goldens on Vulkan"
else
  echo "package_test: no Vulkan device here: the installed binary's Vulkan goldens were not run (SKIP)"
fi

step "man pages"
man1=$tmp/root/usr/share/man/man1
zcat "$man1/rlx.1.gz" | grep -q '^\.TH RLX "1"' || fail "rlx.1"
n=0
for c in $("$rlx" completion commands | cut -f1); do
  page=$man1/rlx-$c.1.gz
  [[ -s $page ]] || fail "no man page for 'rlx $c'"
  zcat "$page" | grep -q "^rlx-$c \\\\- " || fail "rlx-$c.1 is not the page of 'rlx $c'"
  zcat "$page" | grep -q "rlx $c --help\|^\\\\fI\\\\,$c \\\\/" || fail "rlx-$c.1 does not show the usage of 'rlx $c'"
  n=$((n + 1))
done
((n >= 10)) || fail "only $n subcommands listed"
echo "package_test: $n subcommand pages"

step "bash completion (installed file)"
bash "$ROOT/tests/completion_test.sh" "$tmp/root/usr/share/bash-completion/completions/rlx" \
  "$tmp/root/usr/share/zsh/vendor-completions/_rlx" || fail "completion"

step "cmake --install --prefix"
cmake --install "$BUILD_DIR" --prefix "$tmp/prefix" >/dev/null
(cd "$tmp/prefix" && find . -type f | sort) >"$tmp/installed.txt"
(cd "$tmp/root/usr" && find . -type f | sort) >"$tmp/packaged.txt"
diff "$tmp/packaged.txt" "$tmp/installed.txt" || fail "cmake --install and the package install different files"
"$tmp/prefix/bin/rlx" run "$ROOT/graphs/mlp.json" -p "$ROOT/graphs/mlp.safetensors" -i x=@"$ROOT/graphs/mlp.inputs/x.npy" \
  --expect y=@"$ROOT/tests/golden/example_mlp/expected_y.npy" --atol 1e-4 --rtol 1e-4 >/dev/null 2>&1 || fail "the rlx of cmake --install did not run the MLP example"
step "all checks passed"
