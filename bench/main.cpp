// `blockfuse` — the command-line driver for the benchmarks and measurement programs. Each command
// registers itself (harness.h, BLOCKFUSE_COMMAND); this file builds the CLI11 tree from the
// registry and dispatches.
//   blockfuse -h | --version | --list | <command words> [options]   (each command has -h)
// Exit codes: 0 ok, 1 failure (an exception, or a command's own verification), 2 usage (no, or an
// unknown, command; an unknown option; a malformed value) or no usable GPU. --list is for scripts
// (scripts/gpu-check).
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "blockfuse/version.h"
#include "harness.h"

namespace blockfuse::bench {
std::vector<CommandEntry>& command_registry() {
  static std::vector<CommandEntry> r;
  return r;
}
}  // namespace blockfuse::bench

using namespace blockfuse::bench;

#define BF_STR_INNER(x) #x
#define BF_STR(x) BF_STR_INNER(x)

int main(int argc, char** argv) {
  CLI::App app{"blockfuse: benchmarks and measurements of the fused decoder kernels", "blockfuse"};
  app.set_version_flag("--version", "blockfuse " BF_STR(BLOCKFUSE_VERSION_MAJOR) "." BF_STR(
                                        BLOCKFUSE_VERSION_MINOR) "." BF_STR(BLOCKFUSE_VERSION_PATCH));
  bool list = false;
  app.add_flag("--list", list, "print the command names, one per line");
  app.require_subcommand(0, 1);
  CLI::App* bench = app.add_subcommand("bench", "benchmarks: fused kernel vs baseline, verified before timed");
  bench->require_subcommand(1);

  struct Entry {
    std::unique_ptr<Command> cmd;
    std::unique_ptr<Options> opts;
    CLI::App* sub;
    std::string name;
  };
  std::vector<Entry> entries;
  for (const auto& c : command_registry()) {
    const bool is_bench = c.name.rfind("bench ", 0) == 0;
    const std::string word = is_bench ? c.name.substr(6) : c.name;
    CLI::App* sub = (is_bench ? bench : &app)->add_subcommand(word, c.help);
    Entry e{c.make(), std::make_unique<Options>(*sub), sub, word};
    e.cmd->declare(*e.opts);
    entries.push_back(std::move(e));
  }

  try {
    app.parse(argc, argv);
    for (auto& e : entries)
      if (e.sub->parsed()) e.opts->finish(e.cmd->quick());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "blockfuse: %s\n(blockfuse <command> --help lists the options)\n", e.what());
    return 2;
  }
  if (list) {
    for (const auto& c : command_registry()) std::printf("%s\n", c.name.c_str());
    return 0;
  }
  for (auto& e : entries) {
    if (!e.sub->parsed()) continue;
    try {
      return e.cmd->execute(e.name);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "blockfuse: %s\n", ex.what());
      return 1;
    }
  }
  std::fprintf(stderr, "%s", app.help().c_str());
  return 2;
}
