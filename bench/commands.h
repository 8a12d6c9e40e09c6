// The `blockfuse` command-line driver: each subcommand lives in its own file and registers itself
// here, so benchmark files for different kernel families never touch a shared dispatch table.
//
//   static int run(const blockfuse::bench::Args& args);
//   BLOCKFUSE_COMMAND("bench gated-up", run, "TFLOP/s of fused vs cuBLAS (+ swiglu)");
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"

namespace blockfuse::bench {

struct Command {
  std::string name;  // one or two words, e.g. "bench gated-up", "correctness"
  std::function<int(const Args&)> run;
  std::string help;
};

std::vector<Command>& command_registry();

struct CommandRegistrar {
  CommandRegistrar(const char* name, std::function<int(const Args&)> run, const char* help) {
    command_registry().push_back(Command{name, std::move(run), help});
  }
};

}  // namespace blockfuse::bench

#define BF_CONCAT_INNER(a, b) a##b
#define BF_CONCAT(a, b) BF_CONCAT_INNER(a, b)
#define BLOCKFUSE_COMMAND(name, fn, help) \
  static ::blockfuse::bench::CommandRegistrar BF_CONCAT(bf_command_, __LINE__)(name, fn, help)
