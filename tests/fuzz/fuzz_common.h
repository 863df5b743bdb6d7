#pragma once
// Shared by the libFuzzer harnesses: the only acceptable way for rlx to refuse
// an input is an exception derived from rlx::Error. Anything else (a crash, a
// sanitizer report, another exception type, a leak) is a bug; other exceptions
// are turned into an abort with their type and message so libFuzzer saves the input.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <typeinfo>

#include "core/error.h"

namespace rlx::fuzz {

template <class F>
void expect_only_rlx_errors(const char* harness, F&& body) {
  try {
    body();
  } catch (const rlx::Error&) {
    // The expected outcome for bad input.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: escaped exception %s: %s\n", harness, typeid(e).name(), e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s: escaped a non-std exception\n", harness);
    std::abort();
  }
}

}  // namespace rlx::fuzz
