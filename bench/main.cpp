// `blockfuse` — the command-line driver for the benchmarks and measurement programs. Each command
// registers itself (harness.h, BLOCKFUSE_COMMAND); this file builds the CLI11 tree from the
// registry and dispatches.
//   blockfuse -h | --version | --list | <command words> [options]   (each command has -h)
// Exit codes: 0 ok, 1 failure (an exception, or a command's own verification), 2 usage (no, or an
// unknown, command; an unknown option; a malformed value) or an unusable GPU, 77 no CUDA device
// (nothing was run; the examples exit the same way). -h lists every command; --list prints their
// names for scripts (scripts/gpu-check).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

namespace {

std::string joined(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : ", ") + w;
  return s;
}

// The command words before CLI11 sees them: an unknown word (`blockfuse bench nope`) or a missing
// one (`blockfuse bench`) is named with the valid ones, where CLI11 would only say "argument not
// expected" or "a subcommand is required". Returns false after printing the error. Options are
// skipped: neither `blockfuse` nor `blockfuse bench` has an option that takes a value, and the
// words after a command's name are its own.
bool command_words_valid(int argc, char** argv) {
  std::vector<std::string> top = {"bench"}, bench;
  for (const auto& c : command_registry()) {
    if (c.name.rfind("bench ", 0) == 0)
      bench.push_back(c.name.substr(6));
    else
      top.push_back(c.name);
  }
  std::sort(top.begin(), top.end());
  std::sort(bench.begin(), bench.end());
  bool help_or_version = false, in_bench = false;
  for (int i = 1; i < argc; ++i) {
    const std::string w = argv[i];
    if (!w.empty() && w[0] == '-') {
      help_or_version |= w == "-h" || w == "--help" || w == "--version" || w == "--list";
      continue;
    }
    const std::vector<std::string>& valid = in_bench ? bench : top;
    if (std::find(valid.begin(), valid.end(), w) == valid.end()) {
      std::fprintf(stderr, "blockfuse: unknown command '%s%s'; the %scommands are: %s\n(blockfuse -h for help)\n",
                   in_bench ? "bench " : "", w.c_str(), in_bench ? "bench " : "", joined(valid).c_str());
      return false;
    }
    if (w != "bench") return true;  // a command: the rest is its business
    in_bench = true;
  }
  if (in_bench && !help_or_version) {
    std::fprintf(stderr, "blockfuse bench: a command is required, one of: %s\n(blockfuse bench <command> -h for its options)\n",
                 joined(bench).c_str());
    return false;
  }
  return true;
}

}  // namespace

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

  // -h lists every command, the bench ones included (CLI11 itself would list only `bench`).
  std::string footer = "Commands (each has -h for its options):\n";
  std::vector<CommandEntry> sorted = command_registry();
  std::sort(sorted.begin(), sorted.end(), [](const CommandEntry& a, const CommandEntry& b) { return a.name < b.name; });
  for (const auto& c : sorted) {
    std::string name = c.name;
    name.resize(std::max<size_t>(name.size() + 2, 26), ' ');
    footer += "  blockfuse " + name + c.help + "\n";
  }
  footer +=
      "Exit status: 0 ok; 1 a result failed its verification; 2 a usage error or an unusable GPU; 77 no CUDA "
      "device (nothing was run).";
  app.footer(footer);

  if (!command_words_valid(argc, argv)) return 2;
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
