#pragma once
// `rlx generate MODEL`: token-by-token generation with a decoder exported in the standard
// (Hugging Face) layout. Ids in, ids out: no tokenizer.
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace rlx {

struct GenerateFlags {
  std::string model, prompt, mode, backend, output;
  std::string cache_out;  // --cache-out DIR: the final KV cache as DIR/present.N.key.npy, ...
  int device = -1;
  int max_new_tokens = 32;
  std::optional<int64_t> eos;
  bool sample = false;               // --sample; else greedy
  std::string sampling = "greedy";  // set from `sample`: greedy | sample
  double temperature = 1.0, top_p = 1.0;
  int top_k = 0;
  uint64_t seed = 0;
  bool json = false, verbose = false, no_cache = false;
  std::string kv_cache = "auto";  // auto | capacity | grow (lib/runtime/kv_cache.h)
};

void add_generate_options(CLI::App* app, GenerateFlags& f);
int cmd_generate(GenerateFlags& f);

}  // namespace rlx
