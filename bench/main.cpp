// `blockfuse` — the command-line driver for the benchmarks and measurement programs. Each
// subcommand registers itself (bench/commands.h); this file only dispatches.
//   blockfuse --help | --list | <command words> [options]
// A command is matched on its first two argv words, then its first one, so "bench gated-up" and
// "correctness" can coexist. Exit codes: 0 ok, 1 failure (an exception, or a command's own
// verification), 2 usage (no or unknown command). --list is for scripts (scripts/gpu-check).
#include <cstdio>
#include <exception>
#include <string>

#include "commands.h"

namespace blockfuse::bench {
std::vector<Command>& command_registry() {
  static std::vector<Command> r;
  return r;
}
}  // namespace blockfuse::bench

using blockfuse::bench::command_registry;

static void usage(FILE* f) {
  std::fprintf(f, "usage: blockfuse <command> [options]     (blockfuse <command> --help for its options)\n\ncommands:\n");
  for (const auto& c : command_registry()) std::fprintf(f, "  %-22s %s\n", c.name.c_str(), c.help.c_str());
}

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    usage(stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::string(argv[1]) == "--list") {  // machine-readable: one command per line (scripts/gpu-check)
    for (const auto& c : command_registry()) std::printf("%s\n", c.name.c_str());
    return 0;
  }
  for (int words = 2; words >= 1; --words) {
    if (argc < 1 + words) continue;
    std::string name = argv[1];
    for (int i = 2; i <= words; ++i) name += std::string(" ") + argv[i];
    for (const auto& c : command_registry()) {
      if (c.name != name) continue;
      try {
        return c.run(blockfuse::bench::Args(argc, argv, 1 + words));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "blockfuse: %s\n", e.what());
        return 1;
      } catch (...) {
        std::fprintf(stderr, "blockfuse: unknown exception\n");
        return 1;
      }
    }
  }
  std::fprintf(stderr, "blockfuse: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
