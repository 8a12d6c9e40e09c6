// The benchmark harness: every `blockfuse` command is a class with two methods, options() and
// run(); the harness does the rest — option parsing (CLI11: -h/--help, unknown flags, malformed
// numbers and empty lists rejected with exit status 2), the GPU check, one stream and one cuBLAS
// handle, the two ceilings measured in the same run (1 GiB device copy, cuBLAS 8192³ bf16 GEMM),
// verify-then-time bookkeeping, event and CUDA-graph timing with L2 rotation, the table on stdout
// and the JSON file (nlohmann-json) with one row schema.
//
// A complete command (bench/<family>/bench_<family>.cu is globbed into the CLI):
//
//   #include "harness.h"
//   namespace blockfuse::bench {
//   class ScaleBench final : public BenchCommand {
//     std::vector<int64_t> n_ = {1 << 20, 1 << 26};
//     void options(Options& o) override {
//       o.ints("--n", n_, 1, int64_t{1} << 30, "elements", /*quick=*/std::vector<int64_t>{1 << 20});
//     }
//     void run(Bench& b) override {
//       b.columns({"n", "us", "GB/s", "%copy", "verified"});
//       for (int64_t n : n_) {
//         const int sets = rotation_sets(8 * n);                        // inputs rotated past L2
//         std::vector<testing::DeviceBuffer<float>> in, out;
//         for (int i = 0; i < sets; ++i) in.emplace_back(n), out.emplace_back(n);
//         auto call = [&](int i) { my_scale(in[i % sets].data(), out[i % sets].data(), n, b.stream()); };
//         call(0);
//         const bool ok = b.verify("n=" + std::to_string(n), check_my_scale(in[0], out[0]));  // first
//         const Timing t = b.time(call, Method::events());                // then time
//         const double gbs = 8.0 * n / (t.median_ms * 1e6);
//         b.row({std::to_string(n), fmt(t.us(), 2), fmt(gbs, 0), b.pct_of_copy(gbs), ok ? "yes" : "NO"})
//             .set("n", n).set("us", t.us()).set("gbs", gbs).set("verified", ok);
//       }
//     }
//   };
//   BLOCKFUSE_COMMAND(ScaleBench, "bench scale", "GB/s of my_scale vs the device copy");
//   }  // namespace blockfuse::bench
//
// The harness adds --quick, --reps, --warmup, --json FILE, --no-ceilings and --pdl on|off to every BenchCommand,
// prints the table, writes {run info..., "rows": [...]} and exits 1 when a verification failed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include "blockfuse/common.h"
#include "testing/device_buffer.h"
#include "testing/testing.h"

namespace CLI {
class App;
}

namespace blockfuse::bench {

// Objects keep their keys in insertion order, so the JSON reads like the table.
using Json = nlohmann::ordered_json;

// Throws blockfuse::Error naming the failed call.
void cuda_check(cudaError_t err, const char* what);
void cublas_check(cublasStatus_t st, const char* what);
#define BENCH_CUDA(expr) ::blockfuse::bench::cuda_check((expr), #expr)
#define BENCH_CUBLAS(expr) ::blockfuse::bench::cublas_check((expr), #expr)

std::string fmt(double v, int precision = 1);

// ---- options ------------------------------------------------------------------------------------
// A command's options, declared on its CLI11 subcommand. Numbers are strict decimal integers
// (`1e3`, `10x`, `0x10` are errors), lists are comma-separated and may not be empty, a value outside
// [lo, hi] or not among `allowed` is an error naming the option; every error exits with status 2.
// `quick` is the value --quick uses where the option is not given (an explicit option wins).
class Options {
 public:
  explicit Options(CLI::App& app) : app_(app) {}
  CLI::App& app() { return app_; }  // for anything the helpers below do not cover
  void about(const std::string& text);  // the paragraph --help prints under the usage line
  void ints(const std::string& name, std::vector<int64_t>& v, int64_t lo, int64_t hi, const std::string& help,
            std::optional<std::vector<int64_t>> quick = std::nullopt, int64_t multiple_of = 1);
  void integer(const std::string& name, int& v, int lo, int hi, const std::string& help,
               std::optional<int> quick = std::nullopt);
  void words(const std::string& name, std::vector<std::string>& v, const std::vector<std::string>& allowed,
             const std::string& help, std::optional<std::vector<std::string>> quick = std::nullopt);
  // Free-form items, each passed to `check`, which throws blockfuse::Error to reject it.
  void words(const std::string& name, std::vector<std::string>& v, std::function<void(const std::string&)> check,
             const std::string& help, std::optional<std::vector<std::string>> quick = std::nullopt);
  void choice(const std::string& name, std::string& v, const std::vector<std::string>& allowed,
              const std::string& help, std::optional<std::string> quick = std::nullopt);
  void flag(const std::string& name, bool& v, const std::string& help);
  void path(const std::string& name, std::string& v, const std::string& help);  // non-empty
  bool given(const std::string& name) const;
  // After parsing: applies the --quick values of the options not given.
  void finish(bool quick);

 private:
  CLI::App& app_;
  std::vector<std::function<void()>> quick_;
};

// ---- commands -----------------------------------------------------------------------------------
class Command {
 public:
  virtual ~Command() = default;
  virtual void options(Options& o) = 0;  // declare options bound to members (defaults = full run)
  virtual void declare(Options& o) { options(o); }  // what main calls: options() plus common ones
  virtual int execute(const std::string& name) = 0;  // after parsing: exit status
  virtual bool quick() const { return false; }
};

// Figures of one timed variant: median over --reps repetitions (after --warmup), min and max.
struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int reps = 0;
  double us() const { return median_ms * 1e3; }
  double min_us() const { return min_ms * 1e3; }
};

// How a variant is timed. events(): CUDA events around each of --reps calls enqueued back to back,
// call i rotating its inputs (pass i % sets). graph(n): n calls captured into one CUDA graph,
// replayed --reps times, time per call — the cost inside a model's decode graph, for kernels shorter
// than their host launch.
struct Method {
  int graph_calls = 0;  // 0 = events
  static Method events() { return {0}; }
  static Method graph(int calls) { return {calls}; }
  bool is_graph() const { return graph_calls > 0; }
  std::string label() const { return is_graph() ? "graph/" + std::to_string(graph_calls) : "events"; }
};

// Result of checking one output against its reference; `what` says where and how it is wrong.
struct Check {
  bool ok = true;
  double rel_l2 = 0, max_abs = 0;
  int64_t count = 0;
  std::string what;
  void fail(const std::string& why) { ok = false, what += why + "; "; }
  Check& operator+=(const Check& o);  // merges two parts of one output (rel_l2 from both)
  double sum_sq_diff = 0, sum_sq_ref = 0;
};
// A device comparison as a Check: fails on any element out of tolerance, any non-finite output, or
// a relative L2 error above max_rel_l2 (a systematic error hiding inside the per-element band).
// `row0` offsets the reported row when `st` covers a slice.
Check to_check(const testing::CompareStats& st, double max_rel_l2 = 1e-2, int64_t row0 = 0);

struct DeviceInfo {
  std::string name, cc;  // cc "9.0"
  int major = 0, minor = 0, sms = 0, l2_bytes = 0;
};

struct BenchSettings {
  bool quick = false, ceilings = true;
  int reps = 50, warmup = 5;
  std::string json;
  std::string pdl = "on";  // programmatic dependent launch (blockfuse/common.h), set for the whole run
  std::string order = "interleaved";  // how Bench::time_all orders a point's variants (--order)
};

// Bench::time_all's interleaved order: in round r, slot j runs variant (r + j) % n, so over n rounds
// every variant takes every slot once. Timed one after another, a later variant may run on a GPU
// the earlier ones have heated (lower boost clocks at the power limit); the training step showed
// such an order effect (docs/attention.md#backward-sm80).
constexpr int interleaved_variant(int round, int slot, int n) { return n > 0 ? (round + slot) % n : 0; }

// The context of one benchmark run.
class Bench {
 public:
  Bench(std::string name, const BenchSettings& s);
  ~Bench();
  const std::string& name() const { return name_; }
  const BenchSettings& settings() const { return s_; }
  int reps() const { return s_.reps; }
  int warmup() const { return s_.warmup; }
  bool quick() const { return s_.quick; }
  cudaStream_t stream() const { return stream_; }
  const DeviceInfo& device() const { return dev_; }
  // cuBLAS on stream(), with a 32 MiB workspace (NVIDIA's Hopper recommendation; also lets graph
  // capture run without allocations): the GEMM torch.nn.functional.linear gets.
  cublasHandle_t cublas();
  // y[M, N] = x[M, K] · w[N, K]ᵀ (row-major, contiguous), fp32 accumulation, cuBLAS's default algo.
  void linear(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, DType in,
              cudaDataType_t out);

  // The ceilings, measured once on first use in this run; 0 under --no-ceilings.
  double copy_gbs();        // 1 GiB device-to-device copy, bytes read + written
  double matrix_tflops();   // cuBLAS 8192³ bf16 GEMM, fp32 accumulation
  std::string pct_of_copy(double gbs);  // "87.5" or "-" without a ceiling
  std::string pct_of_matrix(double tflops);

  Timing time(const std::function<void(int call)>& fn, Method m);
  // The variants of one point, compared with each other: under --order interleaved (the default)
  // --reps rounds, each timing every variant once in the order interleaved_variant gives (after
  // --warmup rounds); under --order sequential each variant's repetitions in turn, as time() does.
  std::vector<Timing> time_all(const std::vector<std::function<void(int call)>>& fns, Method m);
  // The same-size copy: a D2D copy of `bytes` (read and written), rotated over `sets` buffer pairs,
  // timed like the op. A small problem cannot reach the 1 GiB copy's rate: this is its ceiling.
  Timing time_copy(size_t bytes, int sets, Method m);

  // Records a verification (prints "VERIFY FAILED <point>: <what>" when it failed); returns c.ok.
  bool verify(const std::string& point, const Check& c);
  bool all_verified() const { return failures_ == 0; }
  // Is there room for `bytes` more (plus 256 MiB for cuBLAS and the allocator)? If not, says so,
  // counts a skipped point and returns false.
  bool fits(size_t bytes, const std::string& point);

  void log(const char* format, ...) __attribute__((format(printf, 2, 3)));  // "[name] ..." on stderr
  void title(const std::string& line) { titles_.push_back(line); }          // printed above the table
  void columns(std::vector<std::string> headers);
  // Adds a table row and its JSON row, which starts with benchmark, device, compute_capability.
  class Row {
   public:
    explicit Row(Json& j) : j_(j) {}
    template <class T>
    Row& set(const std::string& key, const T& v) {
      j_[key] = v;
      return *this;
    }
    // The point's verification: verified (b.verify's answer), rel_l2, max_abs_diff, and
    // verify_error when it failed.
    Row& verification(bool ok, const Check& c) {
      set("verified", ok).set("rel_l2", c.rel_l2).set("max_abs_diff", c.max_abs);
      if (!ok) set("verify_error", c.what);
      return *this;
    }
    Json& json() { return j_; }

   private:
    Json& j_;
  };
  Row row(std::vector<std::string> cells);
  Json& info() { return info_; }  // extra run-level JSON fields
  // Prints the table and writes JSON; returns 1 if any verification failed, else 0.
  int finish();

 private:
  std::string name_;
  BenchSettings s_;
  DeviceInfo dev_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  testing::DeviceBuffer<unsigned char> cublas_ws_;
  std::optional<double> copy_gbs_, matrix_tflops_;
  int failures_ = 0, skipped_ = 0;
  std::vector<std::string> titles_, headers_;
  std::vector<std::vector<std::string>> cells_;
  Json info_ = Json::object(), rows_ = Json::array();
};

// A benchmark command: the harness declares --quick/--reps/--warmup/--json/--no-ceilings with
// defaults(), checks for a GPU (exit 2 without one), opens the Bench, calls run(), then finish().
class BenchCommand : public Command {
 public:
  struct Defaults {
    int reps = 50, quick_reps = 20, warmup = 5;
  };
  virtual Defaults defaults() const { return {}; }
  // A command whose points compare variants through Bench::time_all: it takes --order.
  virtual bool compares_variants() const { return false; }
  virtual void run(Bench& b) = 0;

  int execute(const std::string& name) final;
  bool quick() const final { return s_.quick; }
  void declare(Options& o) final;

 protected:
  BenchSettings s_;
};

// ---- timing primitives (Bench::time uses these) -------------------------------------------------
// Median time of fn(warmup + i) for i < reps, each between two CUDA events, enqueued back to back.
Timing time_events(const std::function<void(int)>& fn, cudaStream_t stream, int warmup, int reps);
// Per-call time of `calls` back-to-back calls fn(0..calls-1) captured into one graph.
Timing time_graph(const std::function<void(int)>& fn, cudaStream_t stream, int calls, int warmup, int reps);
// time_events / time_graph for several variants at once, in interleaved rounds (Bench::time_all).
std::vector<Timing> time_interleaved(const std::vector<std::function<void(int)>>& fns, cudaStream_t stream, Method m,
                                     int warmup, int reps);
// How many copies of a working set of `bytes` span >= 3x the L2 size (at least 1, at most max_sets).
int rotation_sets(int64_t bytes, int max_sets = 16);
// A device buffer of 2-byte values copied to the host (a verification's inputs and outputs).
std::vector<uint16_t> host_bits(const testing::DeviceBuffer<uint16_t>& d);

// The exit status of a command that finds no CUDA device: nothing was run. 77 is CTest's and
// Automake's "skipped", the same status the examples (examples/common/example_util.h) return.
constexpr int kExitNoGpu = 77;
// 0 when a CUDA device of compute capability >= 8.0 is usable; otherwise prints why, in the same
// form as the examples ("<program>: no CUDA device found; ... Nothing was run (exit 77).") and
// returns the exit status: kExitNoGpu without a device, 2 for an unusable one.
int gpu_exit_status(const char* program);
// gpu_exit_status(program) == 0.
bool require_gpu(const char* program);
std::string now_iso8601();

// ---- the registry -------------------------------------------------------------------------------
struct CommandEntry {
  std::string name;  // "bench swiglu" or "correctness"
  std::string help;
  std::function<std::unique_ptr<Command>()> make;
};
std::vector<CommandEntry>& command_registry();
struct CommandRegistrar {
  CommandRegistrar(const char* name, const char* help, std::function<std::unique_ptr<Command>()> make) {
    command_registry().push_back({name, help, std::move(make)});
  }
};

}  // namespace blockfuse::bench

#define BF_BENCH_CONCAT_INNER(a, b) a##b
#define BF_BENCH_CONCAT(a, b) BF_BENCH_CONCAT_INNER(a, b)
// Registers a Command subclass under `name` ("bench <x>" or one word).
#define BLOCKFUSE_COMMAND(Type, name, help)                                          \
  static ::blockfuse::bench::CommandRegistrar BF_BENCH_CONCAT(bf_command_, __LINE__)( \
      name, help, [] { return std::unique_ptr<::blockfuse::bench::Command>(new Type()); })
