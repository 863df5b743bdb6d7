#pragma once
// What rlx says about itself to shells, man pages and packagers, generated from the one CLI11
// definition of its commands so that none of it drifts from `--help`:
//  - `rlx completion bash|zsh`: completion scripts (subcommands, flags, the values of --mode,
//    --backend, --format, file arguments);
//  - `rlx completion commands`: one line per subcommand, "NAME<TAB>DESCRIPTION" (the build
//    makes one man page per line with help2man);
//  - `rlx --version [--verbose]`: version, commit and build type; the CPU kernels and devices.
#include <CLI/CLI.hpp>

#include <string>

namespace rlx::cli {

// The completion script for `shell` ("bash" or "zsh"), or the command list for "commands".
// Throws InputError for another shell name.
std::string completion_script(const CLI::App& app, const std::string& shell);

// "rlx 0.1.0 (commit 1a2b3c4d5e6f, Release build, GCC 12.2.0)"; with `verbose`, then the CPU's
// kernels and every backend's devices (as `rlx devices` prints them).
std::string version_text(bool verbose);

}  // namespace rlx::cli
