# Installation (`cmake --install build [--prefix DIR]`) and the Debian package
# (`cpack -G DEB` in the build directory). The installed rlx needs nothing from the source tree:
# its shaders are compiled into it, and OpenBLAS, oneDNN and the Vulkan loader are found by the
# dynamic loader at run time.
find_program(HELP2MAN help2man)
if(NOT HELP2MAN)
  message(STATUS "help2man not found: no man pages (scripts/setup.sh installs it)")
  set(HELP2MAN "")
endif()
set(RLX_SHELL_DOCS ${CMAKE_BINARY_DIR}/shell-docs)
add_custom_command(OUTPUT ${RLX_SHELL_DOCS}/stamp
  COMMAND ${CMAKE_COMMAND} -DRLX=$<TARGET_FILE:rlx> -DHELP2MAN=${HELP2MAN} -DOUT=${RLX_SHELL_DOCS}/share
          -DCHANGELOG=${PROJECT_SOURCE_DIR}/packaging/changelog -P ${PROJECT_SOURCE_DIR}/cmake/shell_docs.cmake
  COMMAND ${CMAKE_COMMAND} -E touch ${RLX_SHELL_DOCS}/stamp
  DEPENDS rlx ${PROJECT_SOURCE_DIR}/cmake/shell_docs.cmake ${PROJECT_SOURCE_DIR}/packaging/changelog
  COMMENT "man pages and shell completion from rlx --help")
add_custom_target(rlx_shell_docs ALL DEPENDS ${RLX_SHELL_DOCS}/stamp)

install(DIRECTORY ${RLX_SHELL_DOCS}/share/man/ DESTINATION ${CMAKE_INSTALL_MANDIR} OPTIONAL)
install(FILES ${RLX_SHELL_DOCS}/share/bash-completion/completions/rlx
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
install(FILES ${RLX_SHELL_DOCS}/share/zsh/vendor-completions/_rlx DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions)
install(FILES README.md packaging/copyright ${RLX_SHELL_DOCS}/share/doc/changelog.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rlx)
set(CPACK_PACKAGE_VENDOR "the rlx developers")
set(CPACK_PACKAGE_CONTACT "rlx developers <rlx-dev@users.noreply.github.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "runner for serialized ML graphs and ONNX models (CPU and Vulkan)")
set(CPACK_PACKAGE_DESCRIPTION "rlx runs rlx.graph JSON graphs and ONNX models (float, int8 and 4-bit
quantized, with control flow) from the command line, in eager, lazy or
compiled mode, on the CPU or on any Vulkan device, and reports outputs and
timings for scripts and CI.")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
# Linked libraries (protobuf-lite, libsodium, fmt, libstdc++) are found by dpkg-shlibdeps;
# OpenBLAS is opened with dlopen, so it is named here. The Vulkan loader and a driver, and
# oneDNN (a faster GEMM for larger products), are optional: rlx says what is missing when a
# command needs it.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libopenblas0-pthread | libopenblas0")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libvulkan1, mesa-vulkan-drivers | vulkan-icd, libdnnl2")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
