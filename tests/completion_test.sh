#!/usr/bin/env bash
# Shell completion (issue 32): the bash script completes subcommands, flags, the values of
# --mode/--backend/--format and files, as a user pressing TAB would see (COMP_WORDS set as
# bash sets them, the completion function called); the zsh script parses and registers `rlx`
# with compinit.
#   tests/completion_test.sh BASH_COMPLETION_FILE ZSH_COMPLETION_FILE
set -uo pipefail
bash_file=$(realpath "$1") zsh_file=$(realpath "$2")
fails=0 checks=0
# complete WORD... : COMPREPLY for the last word, sorted, one line
complete_words() {
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _rlx
           printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " "' _ "$bash_file" "$@"
}
expect() {  # expect "WANT (space-separated, sorted)" WORD...
  local want=$1; shift
  local got
  got=$(complete_words "$@")
  checks=$((checks + 1))
  if [[ "$got" != "$want " ]]; then
    echo "FAIL: completing '$*': got '$got', want '$want '"
    fails=$((fails + 1))
  fi
}
expect_has() {  # expect_has WORD_IN_REPLY WORD...
  local w=$1; shift
  checks=$((checks + 1))
  if [[ " $(complete_words "$@") " != *" $w "* ]]; then
    echo "FAIL: completing '$*': no '$w' in '$(complete_words "$@")'"
    fails=$((fails + 1))
  fi
}
cd "$(mktemp -d)" || exit 2
trap 'rm -rf "$PWD"' EXIT
touch model.onnx mlp.json
expect "bench cache compare completion convert devices generate inspect onnx-ops quantize run" rlx ""
expect "run" rlx ru
expect "compare completion convert" rlx co
expect "--mode" rlx run --mo
expect "compiled eager lazy" rlx run --mode ""
expect "compiled" rlx bench --modes comp
expect "json" rlx bench --format j
expect "int8 q4" rlx quantize --format ""
expect "clear info" rlx cache ""
expect "bash" rlx completion b
expect "mlp.json model.onnx" rlx run ""
expect "model.onnx" rlx convert mo
expect "mlp.json" rlx run --mode lazy ml
expect "--out-dir --output" rlx run --ou
expect_has "--json" rlx run --
expect_has "--steps" rlx run --
expect_has "--max-new-tokens" rlx generate --
expect_has "cpu" rlx run --backend ""
expect_has "model.onnx" rlx run --params ""   # a value that is a file
checks=$((checks + 1))
if ! bash -c 'source "$1"; complete -p rlx' _ "$bash_file" | grep -q -- "-F _rlx"; then
  echo "FAIL: the bash file does not register _rlx for rlx"; fails=$((fails + 1))
fi
if command -v zsh >/dev/null; then
  checks=$((checks + 1))
  d=$(mktemp -d)
  cp "$zsh_file" "$d/_rlx"
  got=$(zsh -fc "fpath=($d \$fpath); autoload -U compinit; compinit -u -d $d/.zcompdump; print -r -- \${_comps[rlx]}" 2>&1)
  zsh -n "$zsh_file" && [[ $got == _rlx ]] || { echo "FAIL: zsh: compinit registered '$got' for rlx"; fails=$((fails + 1)); }
  rm -rf "$d"
else
  echo "SKIP: no zsh here: the zsh completion was not checked"
fi
echo "completion tests: $((checks - fails)) of $checks checks passed"
((fails == 0))
