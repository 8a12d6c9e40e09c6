// Implementation of the shared benchmark utilities (bench_util.h): option parsing, CUDA-event and
// CUDA-graph timing, L2-rotation sizing, the two ceilings every benchmark quotes (cuBLAS 8192^3
// bf16 GEMM, device-to-device copy), a small JSON writer and a fixed-width table. Every CUDA and
// cuBLAS call is checked and throws blockfuse::Error naming the call, so a first run on a new
// machine fails with a readable message instead of printing garbage figures.
#include "bench_util.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include <cublas_v2.h>

#include "blockfuse/common.h"
#include "testing/testing.h"

namespace blockfuse::bench {

Args::Args(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      const auto eq = a.find('=');
      if (eq != std::string::npos) {
        kv_[a.substr(2, eq - 2)] = a.substr(eq + 1);
      } else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
        kv_[a.substr(2)] = argv[++i];
      } else {
        kv_[a.substr(2)] = "";
      }
    } else {
      positional_.push_back(a);
    }
  }
}
bool Args::has(const std::string& k) const { return kv_.count(k) > 0; }
std::string Args::get(const std::string& k, const std::string& def) const {
  auto it = kv_.find(k);
  return it == kv_.end() ? def : it->second;
}
int64_t Args::get_int(const std::string& k, int64_t def) const {
  if (!has(k)) return def;
  try {
    return std::stoll(get(k));
  } catch (...) {
    throw Error("option --" + k + " = '" + get(k) + "': required an integer");
  }
}
double Args::get_double(const std::string& k, double def) const {
  if (!has(k)) return def;
  try {
    return std::stod(get(k));
  } catch (...) {
    throw Error("option --" + k + " = '" + get(k) + "': required a number");
  }
}
std::vector<std::string> Args::get_list(const std::string& k, const std::vector<std::string>& def) const {
  if (!has(k)) return def;
  std::vector<std::string> out;
  std::stringstream ss(get(k));
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}
std::vector<int64_t> Args::get_int_list(const std::string& k, const std::vector<int64_t>& def) const {
  if (!has(k)) return def;
  std::vector<int64_t> out;
  for (const auto& s : get_list(k, {})) {
    try {
      out.push_back(std::stoll(s));
    } catch (...) {
      throw Error("option --" + k + ": '" + s + "' is not an integer");
    }
  }
  return out;
}

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw Error(std::string("CUDA error ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ") in " + what);
}

bool require_gpu(const char* program) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    (void)cudaGetLastError();  // a CPU-only machine reports an error here; leave none behind
    std::fprintf(stderr,
                 "%s: no CUDA device found (cudaGetDeviceCount: %s). This benchmark needs an NVIDIA GPU with "
                 "compute capability >= 8.0; nothing was measured.\n",
                 program, err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return false;
  }
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    std::fprintf(stderr, "%s: cannot query CUDA device properties; nothing was measured.\n", program);
    return false;
  }
  if (p.major < 8) {
    std::fprintf(stderr,
                 "%s: device %d (%s) has compute capability %d.%d; this benchmark needs >= 8.0. Nothing was "
                 "measured.\n",
                 program, dev, p.name, p.major, p.minor);
    return false;
  }
  return true;
}

static Timing summarize(std::vector<float> t) {
  std::sort(t.begin(), t.end());
  Timing r{};
  r.reps = static_cast<int>(t.size());
  r.min_ms = t.front();
  r.max_ms = t.back();
  r.median_ms = t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
  return r;
}

Timing time_it(const std::function<void(int)>& fn, cudaStream_t stream, int warmup, int reps) {
  reps = std::max(1, reps);
  for (int i = 0; i < warmup; ++i) fn(i);
  BENCH_CUDA(cudaStreamSynchronize(stream));
  // One event pair per repetition, all enqueued back to back and read after one final sync. With a
  // sync after every repetition the GPU would sit idle between the start event and the kernel while
  // the host validates arguments and launches (several µs: ~5% of a 200 µs GEMM), and that idle
  // time would be charged to the kernel. Here the host runs ahead and the GPU never waits, except
  // in the first repetition, which the median ignores. Kernels shorter than their host launch cost
  // stay host-bound this way: time those with time_graph.
  struct Events {
    std::vector<cudaEvent_t> e;
    ~Events() {
      for (cudaEvent_t x : e) cudaEventDestroy(x);
    }
  } ev;
  ev.e.reserve(size_t(2) * reps);
  for (int i = 0; i < 2 * reps; ++i) {
    cudaEvent_t x = nullptr;
    BENCH_CUDA(cudaEventCreate(&x));
    ev.e.push_back(x);
  }
  for (int i = 0; i < reps; ++i) {
    BENCH_CUDA(cudaEventRecord(ev.e[size_t(2 * i)], stream));
    fn(warmup + i);
    BENCH_CUDA(cudaEventRecord(ev.e[size_t(2 * i + 1)], stream));
  }
  BENCH_CUDA(cudaEventSynchronize(ev.e.back()));
  BENCH_CUDA(cudaGetLastError());
  std::vector<float> t(size_t(reps), 0.f);
  for (int i = 0; i < reps; ++i) BENCH_CUDA(cudaEventElapsedTime(&t[size_t(i)], ev.e[size_t(2 * i)], ev.e[size_t(2 * i + 1)]));
  return summarize(std::move(t));
}

Timing time_graph(const std::function<void()>& fn, cudaStream_t stream, int warmup, int reps) {
  return time_graph_per_call(fn, stream, 1, warmup, reps);
}

Timing time_graph_per_call(const std::function<void()>& fn, cudaStream_t stream, int calls_per_graph,
                           int warmup, int reps) {
  // The legacy default stream cannot be captured; say so instead of failing inside the capture.
  if (stream == nullptr) throw Error("time_graph: needs a created stream (the default stream cannot be captured)");
  if (calls_per_graph < 1) throw Error("time_graph_per_call: calls_per_graph must be >= 1");
  fn();  // first call outside the capture (one-time setup such as shared-memory opt-in)
  BENCH_CUDA(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls_per_graph; ++i) fn();
  BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
  struct Guard {
    cudaGraph_t g;
    cudaGraphExec_t e = nullptr;
    ~Guard() {
      if (e) cudaGraphExecDestroy(e);
      cudaGraphDestroy(g);
    }
  } guard{graph};
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  guard.e = exec;
  Timing t = time_it([&](int) { BENCH_CUDA(cudaGraphLaunch(exec, stream)); }, stream, warmup, reps);
  t.median_ms /= calls_per_graph;
  t.min_ms /= calls_per_graph;
  t.max_ms /= calls_per_graph;
  return t;
}

int rotation_sets(int64_t bytes, int max_sets) {
  int dev = 0, l2 = 50 << 20;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess ||
      l2 <= 0)
    l2 = 50 << 20;  // H100's 50 MB when the query fails
  (void)cudaGetLastError();
  if (bytes <= 0) return 1;
  const int64_t want = (3 * int64_t(l2) + bytes - 1) / bytes;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(max_sets, want)));
}

DevBuf::DevBuf(size_t n) : bytes(n) {
  if (n == 0) return;  // nothing to allocate (p stays null)
  const cudaError_t e = cudaMalloc(&p, n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    p = nullptr;
    throw Error("cudaMalloc of " + fmt(n / 1048576.0, 1) + " MiB failed: " + cudaGetErrorString(e));
  }
}
DevBuf::~DevBuf() {
  if (p) cudaFree(p);
}

namespace {
#define BENCH_CUBLAS(expr)                                                                            \
  do {                                                                                                \
    const cublasStatus_t st_ = (expr);                                                                \
    if (st_ != CUBLAS_STATUS_SUCCESS) throw Error(std::string("cuBLAS status ") + std::to_string(int(st_)) + " in " #expr); \
  } while (0)
}  // namespace

double measure_copy_bandwidth_gbs(cudaStream_t stream) {
  // 1 GiB each way: far beyond L2, so this is the DRAM rate a memory-bound kernel can hope for.
  const size_t bytes = size_t(1) << 30;
  DevBuf a(bytes), b(bytes);
  BENCH_CUDA(cudaMemsetAsync(a.p, 0x5a, bytes, stream));
  BENCH_CUDA(cudaMemsetAsync(b.p, 0xa5, bytes, stream));
  const Timing t = time_it(
      [&](int i) {
        BENCH_CUDA(cudaMemcpyAsync(i % 2 ? a.p : b.p, i % 2 ? b.p : a.p, bytes, cudaMemcpyDeviceToDevice, stream));
      },
      stream, 3, 20);
  return 2.0 * double(bytes) / (t.median_ms * 1e-3) / 1e9;  // bytes read + bytes written
}

double measure_cublas_bf16_tflops(cudaStream_t stream) {
  const int n = 8192;
  const size_t bytes = size_t(n) * n * 2;
  DevBuf a(bytes), b(bytes), c(bytes);
  // Random, non-zero operands: zeros draw less power and can run faster than real data.
  testing::fill_uniform(make_matrix(a.p, DType::kBF16, n, n), -1.f, 1.f, 101, stream);
  testing::fill_uniform(make_matrix(b.p, DType::kBF16, n, n), -1.f, 1.f, 102, stream);
  BENCH_CUDA(cudaStreamSynchronize(stream));
  struct Handle {
    cublasHandle_t h = nullptr;
    ~Handle() {
      if (h) cublasDestroy(h);
    }
  } handle;
  BENCH_CUBLAS(cublasCreate(&handle.h));
  BENCH_CUBLAS(cublasSetStream(handle.h, stream));
  const float one = 1.f, zero = 0.f;
  const Timing t = time_it(
      [&](int) {
        BENCH_CUBLAS(cublasGemmEx(handle.h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a.p, CUDA_R_16BF, n, b.p,
                                  CUDA_R_16BF, n, &zero, c.p, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      },
      stream, 3, 20);
  return 2.0 * n * double(n) * n / (t.median_ms * 1e-3) / 1e12;
}

std::string device_name() {
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) return "unknown";
  return p.name;
}

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

Json Json::object() { Json j; j.kind_ = kObj; return j; }
Json Json::array() { Json j; j.kind_ = kArr; return j; }
Json::Json(double v) : kind_(kNum), num_(v) {}
Json::Json(int64_t v) : kind_(kInt), int_(v) {}
Json::Json(bool v) : kind_(kBool), b_(v) {}
Json::Json(const char* v) : kind_(kStr), s_(v) {}
Json::Json(const std::string& v) : kind_(kStr), s_(v) {}
Json& Json::set(const std::string& k, Json v) {
  for (auto& kv : obj_)
    if (kv.first == k) { kv.second = std::move(v); return *this; }
  obj_.emplace_back(k, std::move(v));
  return *this;
}
Json& Json::push(Json v) { arr_.push_back(std::move(v)); return *this; }

static void escape(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void Json::dump_to(std::string& out, int indent, int depth) const {
  const std::string pad(indent * (depth + 1), ' '), pad0(indent * depth, ' ');
  const char* nl = indent ? "\n" : "";
  switch (kind_) {
    case kNull: out += "null"; break;
    case kNum: {
      if (!std::isfinite(num_)) { out += "null"; break; }
      char b[32];
      std::snprintf(b, sizeof b, "%.10g", num_);  // enough digits for FLOP counts and ms
      out += b;
      break;
    }
    case kInt: out += std::to_string(int_); break;
    case kBool: out += b_ ? "true" : "false"; break;
    case kStr: escape(out, s_); break;
    case kObj:
      out += "{";
      for (size_t i = 0; i < obj_.size(); ++i) {
        out += i ? "," : "";
        out += nl + pad;
        escape(out, obj_[i].first);
        out += ": ";
        obj_[i].second.dump_to(out, indent, depth + 1);
      }
      out += obj_.empty() ? "}" : nl + pad0 + "}";
      break;
    case kArr:
      out += "[";
      for (size_t i = 0; i < arr_.size(); ++i) {
        out += i ? "," : "";
        out += nl + pad;
        arr_[i].dump_to(out, indent, depth + 1);
      }
      out += arr_.empty() ? "]" : nl + pad0 + "]";
      break;
  }
}
std::string Json::dump(int indent) const {
  std::string s;
  dump_to(s, indent, 0);
  return s + "\n";
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  if (!f) throw Error("cannot write " + path);
  f << text;
  f.close();
  if (!f) throw Error("error writing " + path);
}

void Table::print(FILE* f) const {
  std::vector<size_t> w(headers_.size());
  for (size_t i = 0; i < headers_.size(); ++i) w[i] = headers_[i].size();
  for (const auto& r : rows_)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  auto line = [&](const std::vector<std::string>& r) {
    // First column (names) left-aligned, the figures right-aligned so digits line up.
    for (size_t i = 0; i < w.size(); ++i)
      std::fprintf(f, i ? "  %*s" : "%-*s", int(w[i]), i < r.size() ? r[i].c_str() : "");
    std::fprintf(f, "\n");
  };
  line(headers_);
  size_t total = 0;
  for (auto x : w) total += x + 2;
  std::fprintf(f, "%s\n", std::string(total > 2 ? total - 2 : 0, '-').c_str());
  for (const auto& r : rows_) line(r);
}

std::string fmt(double v, int precision) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", precision, v);
  return b;
}

}  // namespace blockfuse::bench
