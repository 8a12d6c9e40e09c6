// Shared pieces of the benchmark programs: argument parsing, CUDA-event timing, L2-rotation sizing,
// device ceilings, a minimal JSON writer and table printing. No third-party dependencies (the GPU
// machine has no package registry).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

namespace blockfuse::bench {

// --key value / --key=value / --flag options plus positional words.
class Args {
 public:
  Args(int argc, char** argv, int first);
  bool has(const std::string& key) const;
  std::string get(const std::string& key, const std::string& def = "") const;
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_double(const std::string& key, double def) const;
  // Comma-separated list: "--tokens 512,1024".
  std::vector<std::string> get_list(const std::string& key, const std::vector<std::string>& def) const;
  std::vector<int64_t> get_int_list(const std::string& key, const std::vector<int64_t>& def) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> kv_;
  std::vector<std::string> positional_;
};

// Throws blockfuse::Error on failure, naming the call.
void cuda_check(cudaError_t err, const char* what);
#define BENCH_CUDA(expr) ::blockfuse::bench::cuda_check((expr), #expr)

// A device allocation freed on scope exit, so a point that throws or is skipped leaks nothing and
// the next (larger) point sees all the memory again. Throws blockfuse::Error when cudaMalloc fails;
// a 0-byte buffer allocates nothing (p == nullptr).
struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  DevBuf() = default;
  explicit DevBuf(size_t n);
  ~DevBuf();
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

// Returns false (and prints why to stderr) when no usable CUDA device is present.
bool require_gpu(const char* program);

// Median time in ms of `fn` (which enqueues work on `stream`), timed with CUDA events around each
// repetition after `warmup` untimed calls. `reps` >= 1. The repetitions are enqueued back to back
// (one event pair each, one sync at the end) so host launch overhead is hidden, as it is in a model.
struct Timing {
  double median_ms, min_ms, max_ms;
  int reps;
};
Timing time_it(const std::function<void(int rep)>& fn, cudaStream_t stream, int warmup, int reps);
// The same, timing replays of a CUDA graph captured from one call of fn (for small launches).
Timing time_graph(const std::function<void()>& fn, cudaStream_t stream, int warmup, int reps);
// Per-call time of `calls_per_graph` back-to-back calls of fn captured into one graph (replay time
// divided by calls_per_graph): the cost of a small kernel inside a model's CUDA graph, where the
// graph launch itself is paid once per decoder step, not once per kernel.
Timing time_graph_per_call(const std::function<void()>& fn, cudaStream_t stream, int calls_per_graph,
                           int warmup, int reps);

// How many copies of a working set of `bytes` to rotate through so that repeated calls do not
// find their inputs in L2: enough copies to span >= 3x the L2 size, at least 1, at most `max_sets`.
int rotation_sets(int64_t bytes, int max_sets = 16);

// Ceilings measured in the current run.
double measure_copy_bandwidth_gbs(cudaStream_t stream);   // D2D copy, bytes read + written, GB/s
double measure_cublas_bf16_tflops(cudaStream_t stream);   // 8192^3 bf16 GEMM, fp32 accumulate

std::string device_name();
std::string now_iso8601();

// Minimal JSON writer: objects, arrays, strings, numbers, bools.
class Json {
 public:
  static Json object();
  static Json array();
  Json() = default;
  Json(double v);
  Json(int64_t v);
  Json(int v) : Json(static_cast<int64_t>(v)) {}
  Json(bool v);
  Json(const char* v);
  Json(const std::string& v);
  Json& set(const std::string& key, Json v);  // objects
  Json& push(Json v);                          // arrays
  std::string dump(int indent = 2) const;

 private:
  enum Kind { kNull, kNum, kInt, kBool, kStr, kObj, kArr } kind_ = kNull;
  double num_ = 0;
  int64_t int_ = 0;
  bool b_ = false;
  std::string s_;
  std::vector<std::pair<std::string, Json>> obj_;
  std::vector<Json> arr_;
  void dump_to(std::string& out, int indent, int depth) const;
};
void write_file(const std::string& path, const std::string& text);

// Fixed-width table on stdout.
class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(FILE* f = stdout) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};
std::string fmt(double v, int precision = 1);

}  // namespace blockfuse::bench
