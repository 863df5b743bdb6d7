# Generates, from the built rlx itself (so they never drift from --help):
#   OUT/man/man1/rlx.1.gz and rlx-COMMAND.1.gz (help2man, when HELP2MAN is set),
#   OUT/bash-completion/completions/rlx, OUT/zsh/vendor-completions/_rlx,
#   OUT/doc/changelog.gz (from CHANGELOG, gzip -9n as Debian policy asks).
#   cmake -DRLX=<rlx> -DHELP2MAN=<help2man or empty> -DOUT=<dir> -DCHANGELOG=<file> -P cmake/shell_docs.cmake
function(run_checked)
  execute_process(${ARGN} RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "shell_docs: ${ARGN}: exit ${rc}: ${err}")
  endif()
endfunction()

file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}/bash-completion/completions" "${OUT}/zsh/vendor-completions" "${OUT}/doc")
run_checked(COMMAND "${RLX}" completion bash OUTPUT_FILE "${OUT}/bash-completion/completions/rlx")
run_checked(COMMAND "${RLX}" completion zsh OUTPUT_FILE "${OUT}/zsh/vendor-completions/_rlx")
configure_file("${CHANGELOG}" "${OUT}/doc/changelog" COPYONLY)
run_checked(COMMAND gzip -9nf "${OUT}/doc/changelog")

if(HELP2MAN)
  file(MAKE_DIRECTORY "${OUT}/man/man1")
  # The pages' footer names the version alone (the commit and build type are in `rlx --version`).
  execute_process(COMMAND "${RLX}" --version OUTPUT_VARIABLE version)
  string(REGEX MATCH "^rlx [^ \n]+" version "${version}")
  execute_process(COMMAND "${RLX}" completion commands OUTPUT_VARIABLE commands RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR commands STREQUAL "")
    message(FATAL_ERROR "shell_docs: ${RLX} completion commands: exit ${rc}")
  endif()
  string(REPLACE ";" "<semicolon>" commands "${commands}")  # a description's ';' is not a list separator
  string(REPLACE "\n" ";" lines "${commands}")
  set(see_also "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^([^\t]+)\t(.*)$")
      list(APPEND names "${CMAKE_MATCH_1}")
      string(REPLACE "<semicolon>" ";" desc "${CMAKE_MATCH_2}")
      set(desc_${CMAKE_MATCH_1} "${desc}")
      string(APPEND see_also ".BR rlx-${CMAKE_MATCH_1} (1),\n")
    endif()
  endforeach()
  string(REGEX REPLACE ",\n$" "\n" see_also "${see_also}")
  file(WRITE "${OUT}/see_also.h2m" "[SEE ALSO]\nOne page per command:\n${see_also}.PP\nThe documentation in /usr/share/doc/rlx (README.md and docs/).\n")
  run_checked(COMMAND "${HELP2MAN}" --no-info --version-string "${version}" --name "run serialized ML graphs and ONNX models on the CPU or through Vulkan"
                      --include "${OUT}/see_also.h2m" --output "${OUT}/man/man1/rlx.1" "${RLX}")
  foreach(n IN LISTS names)
    set(page "${OUT}/man/man1/rlx-${n}.1")
    file(WRITE "${OUT}/see_also.h2m" "[SEE ALSO]\n.BR rlx (1)\n")
    # (not through run_checked: ARGN would split a description at its ';')
    execute_process(COMMAND "${HELP2MAN}" --no-info --version-string "${version}" --name "${desc_${n}}" --help-option "${n} --help"
                            --include "${OUT}/see_also.h2m" --output "${page}" "${RLX}" RESULT_VARIABLE rc ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "shell_docs: help2man for 'rlx ${n}': exit ${rc}: ${err}")
    endif()
    # help2man names the page after the program: make it rlx-COMMAND's own page.
    string(TOUPPER "${n}" upper)
    file(READ "${page}" text)
    string(REGEX REPLACE "\n\\.TH RLX " "\n.TH RLX-${upper} " text "${text}")
    string(REGEX REPLACE "\n\\.SH NAME\nrlx " "\n.SH NAME\nrlx-${n} " text "${text}")
    file(WRITE "${page}" "${text}")
  endforeach()
  file(REMOVE "${OUT}/see_also.h2m")
  file(GLOB pages "${OUT}/man/man1/*.1")
  run_checked(COMMAND gzip -9nf ${pages})
endif()
