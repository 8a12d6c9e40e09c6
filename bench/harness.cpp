// The benchmark harness (harness.h): option helpers over CLI11, timing, ceilings, verification
// bookkeeping, the table and the JSON file. Every CUDA and cuBLAS call is checked and throws
// blockfuse::Error naming the call, so a first run on a new machine fails with a readable message
// instead of printing garbage figures.
#include "harness.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>

namespace blockfuse::bench {

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw Error(std::string("CUDA error ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ") in " + what);
}
void cublas_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw Error("cuBLAS status " + std::to_string(int(st)) + " in " + what);
}

std::string fmt(double v, int precision) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", precision, v);
  return b;
}

// ---- options ------------------------------------------------------------------------------------
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Strict decimal: optional '-', digits, nothing else (std::stoll would read "1e3" as 1 and
// "10x" as 10; CLI11's own conversion reads "010" as octal).
int64_t parse_int(const std::string& opt, const std::string& s, int64_t lo, int64_t hi) {
  size_t i = s.size() > 1 && s[0] == '-' ? 1 : 0;
  bool digits = i < s.size() && s.size() - i <= 18;
  for (size_t j = i; j < s.size(); ++j) digits = digits && s[j] >= '0' && s[j] <= '9';
  if (!digits) throw CLI::ValidationError(opt, "'" + s + "' is not an integer");
  const int64_t v = std::stoll(s);
  if (v < lo || v > hi)
    throw CLI::ValidationError(opt, s + " is not in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

std::vector<std::string> split_list(const std::string& opt, const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) throw CLI::ValidationError(opt, "empty item in list '" + s + "'");
    out.push_back(item);
  }
  if (out.empty()) throw CLI::ValidationError(opt, "the list is empty");
  if (!s.empty() && s.back() == ',') throw CLI::ValidationError(opt, "empty item in list '" + s + "'");
  return out;
}

std::string join_ints(const std::vector<int64_t>& v) {
  std::string s;
  for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

void Options::ints(const std::string& name, std::vector<int64_t>& v, int64_t lo, int64_t hi, const std::string& help,
                   std::optional<std::vector<int64_t>> quick, int64_t multiple_of) {
  std::string text = help + " (comma-separated, each in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  text += multiple_of > 1 ? " and a multiple of " + std::to_string(multiple_of) : "";
  text += v.empty() ? "" : "; default " + join_ints(v);
  text += quick ? "; --quick: " + join_ints(*quick) : "";
  app_.add_option_function<std::string>(
          name, [&v, name, lo, hi, multiple_of](const std::string& s) {
            v.clear();
            for (const auto& w : split_list(name, s)) {
              v.push_back(parse_int(name, w, lo, hi));
              if (v.back() % multiple_of != 0)
                throw CLI::ValidationError(name, w + " is not a multiple of " + std::to_string(multiple_of));
            }
          },
          text + ")")
      ->type_name("LIST");
  if (quick) quick_.push_back([this, name, &v, q = *quick] { if (!given(name)) v = q; });
}

void Options::integer(const std::string& name, int& v, int lo, int hi, const std::string& help,
                      std::optional<int> quick) {
  std::string text = help + " (default " + std::to_string(v) + (quick ? "; --quick: " + std::to_string(*quick) : "") + ")";
  app_.add_option_function<std::string>(
          name, [&v, name, lo, hi](const std::string& s) { v = int(parse_int(name, s, lo, hi)); }, text)
      ->type_name("N");
  if (quick) quick_.push_back([this, name, &v, q = *quick] { if (!given(name)) v = q; });
}

void Options::words(const std::string& name, std::vector<std::string>& v, const std::vector<std::string>& allowed,
                    const std::string& help, std::optional<std::vector<std::string>> quick) {
  std::string text = help + " (comma-separated: " + join(allowed) + (v.empty() ? "" : "; default " + join(v));
  text += quick ? "; --quick: " + join(*quick) : "";
  app_.add_option_function<std::string>(
          name, [&v, name, allowed](const std::string& s) {
            v = split_list(name, s);
            for (const auto& w : v)
              if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), w) == allowed.end())
                throw CLI::ValidationError(name, "unknown '" + w + "' (known: " + join(allowed) + ")");
          },
          text + ")")
      ->type_name("LIST");
  if (quick) quick_.push_back([this, name, &v, q = *quick] { if (!given(name)) v = q; });
}

void Options::words(const std::string& name, std::vector<std::string>& v,
                    std::function<void(const std::string&)> check, const std::string& help,
                    std::optional<std::vector<std::string>> quick) {
  std::string text = help + " (comma-separated" + (v.empty() ? "" : "; default " + join(v));
  text += quick ? "; --quick: " + join(*quick) : "";
  app_.add_option_function<std::string>(
          name, [&v, name, check](const std::string& s) {
            v = split_list(name, s);
            for (const auto& w : v) try {
                check(w);
              } catch (const Error& e) {
                throw CLI::ValidationError(name, e.what());
              }
          },
          text + ")")
      ->type_name("LIST");
  if (quick) quick_.push_back([this, name, &v, q = *quick] { if (!given(name)) v = q; });
}

void Options::choice(const std::string& name, std::string& v, const std::vector<std::string>& allowed,
                     const std::string& help, std::optional<std::string> quick) {
  const std::string text = help + " (" + join(allowed) + "; default " + v + (quick ? "; --quick: " + *quick : "") + ")";
  app_.add_option_function<std::string>(
          name, [&v, name, allowed](const std::string& s) {
            if (std::find(allowed.begin(), allowed.end(), s) == allowed.end())
              throw CLI::ValidationError(name, "'" + s + "' is not one of " + join(allowed));
            v = s;
          },
          text)
      ->type_name("WORD");
  if (quick) quick_.push_back([this, name, &v, q = *quick] { if (!given(name)) v = q; });
}

void Options::flag(const std::string& name, bool& v, const std::string& help) { app_.add_flag(name, v, help); }

void Options::path(const std::string& name, std::string& v, const std::string& help) {
  app_.add_option_function<std::string>(
          name, [&v, name](const std::string& s) {
            if (s.empty()) throw CLI::ValidationError(name, "needs a file name");
            v = s;
          },
          help)
      ->type_name("FILE");
}

void Options::about(const std::string& text) { app_.description(text); }

bool Options::given(const std::string& name) const { return app_.count(name) > 0; }

void Options::finish(bool quick) {
  if (quick)
    for (auto& f : quick_) f();
}

// ---- verification -------------------------------------------------------------------------------
Check& Check::operator+=(const Check& o) {
  ok = ok && o.ok;
  what += o.what;
  count += o.count;
  max_abs = std::max(max_abs, o.max_abs);
  sum_sq_diff += o.sum_sq_diff;
  sum_sq_ref += o.sum_sq_ref;
  rel_l2 = sum_sq_ref > 0 ? std::sqrt(sum_sq_diff / sum_sq_ref) : 0;
  return *this;
}

Check to_check(const testing::CompareStats& st, double max_rel_l2, int64_t row0) {
  Check c;
  c.count = st.count;
  c.max_abs = st.max_abs_diff;
  c.sum_sq_diff = st.sum_sq_diff;
  c.sum_sq_ref = st.sum_sq_ref;
  c.rel_l2 = st.rel_l2();
  if (st.violations || st.nonfinite)
    c.fail(std::to_string(st.violations) + " of " + std::to_string(st.count) + " out of tolerance, " +
           std::to_string(st.nonfinite) + " non-finite, first at (" + std::to_string(row0 + st.first_bad_row) + ", " +
           std::to_string(st.first_bad_col) + "), max |diff| " + fmt(st.max_abs_diff, 6));
  if (!(c.rel_l2 <= max_rel_l2)) c.fail("relative L2 error " + fmt(c.rel_l2, 6) + " > " + fmt(max_rel_l2, 4));
  return c;
}

// ---- timing -------------------------------------------------------------------------------------
namespace {
Timing summarize(std::vector<float> t) {
  std::sort(t.begin(), t.end());
  Timing r{};
  r.reps = static_cast<int>(t.size());
  r.min_ms = t.front();
  r.max_ms = t.back();
  r.median_ms = t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
  return r;
}
}  // namespace

namespace {
// Over n rounds every variant takes every slot once (what makes the order fair).
constexpr bool interleaving_is_a_latin_square(int n) {
  for (int v = 0; v < n; ++v)
    for (int j = 0; j < n; ++j) {
      int seen = 0;
      for (int r = 0; r < n; ++r) seen += interleaved_variant(r, j, n) == v;
      if (seen != 1) return false;
    }
  return true;
}
static_assert(interleaving_is_a_latin_square(1) && interleaving_is_a_latin_square(2) &&
              interleaving_is_a_latin_square(3) && interleaving_is_a_latin_square(5));

// `calls` back-to-back calls fn(0..calls-1) captured into one graph, replayed by launch().
class CallGraph {
 public:
  CallGraph(const std::function<void(int)>& fn, cudaStream_t stream, int calls) : stream_(stream) {
    // The legacy default stream cannot be captured; say so instead of failing inside the capture.
    if (stream == nullptr) throw Error("timing a graph needs a created stream (the default stream cannot be captured)");
    if (calls < 1) throw Error("timing a graph: calls must be >= 1");
    fn(0);  // first call outside the capture (one-time setup such as shared-memory opt-in)
    BENCH_CUDA(cudaStreamSynchronize(stream));
    BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < calls; ++i) fn(i);
    BENCH_CUDA(cudaStreamEndCapture(stream, &graph_));
    BENCH_CUDA(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  CallGraph(const CallGraph&) = delete;
  CallGraph& operator=(const CallGraph&) = delete;
  ~CallGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  void launch() const { BENCH_CUDA(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaStream_t stream_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// The one event loop: `warmup` rounds, then `reps` rounds each calling every unit once in the order
// interleaved_variant gives, one event pair around each call. All rounds are enqueued back to back
// and read after one sync: with a sync per repetition the GPU would idle while the host validates
// and launches (several µs, ~5 % of a 200 µs GEMM) and that idle time would be charged to the kernel.
// Kernels shorter than their host launch stay host-bound this way: time those with Method::graph.
std::vector<Timing> time_rounds(const std::vector<std::function<void(int)>>& units, cudaStream_t stream, int warmup,
                                int reps) {
  const int n = static_cast<int>(units.size());
  if (n == 0) return {};
  reps = std::max(1, reps);
  for (int r = 0; r < warmup; ++r)
    for (int j = 0; j < n; ++j) units[size_t(interleaved_variant(r, j, n))](r);
  BENCH_CUDA(cudaStreamSynchronize(stream));
  struct Events {
    std::vector<cudaEvent_t> e;
    ~Events() {
      for (cudaEvent_t x : e) cudaEventDestroy(x);
    }
  } ev;
  const size_t count = size_t(2) * size_t(n) * size_t(reps);
  ev.e.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    cudaEvent_t x = nullptr;
    BENCH_CUDA(cudaEventCreate(&x));
    ev.e.push_back(x);
  }
  auto at = [&](int r, int v, int end) { return ev.e[size_t(2) * (size_t(r) * size_t(n) + size_t(v)) + size_t(end)]; };
  for (int r = 0; r < reps; ++r)
    for (int j = 0; j < n; ++j) {
      const int v = interleaved_variant(r, j, n);
      BENCH_CUDA(cudaEventRecord(at(r, v, 0), stream));
      units[size_t(v)](warmup + r);
      BENCH_CUDA(cudaEventRecord(at(r, v, 1), stream));
    }
  BENCH_CUDA(cudaStreamSynchronize(stream));
  BENCH_CUDA(cudaGetLastError());
  std::vector<Timing> out;
  for (int v = 0; v < n; ++v) {
    std::vector<float> t(size_t(reps), 0.f);
    for (int r = 0; r < reps; ++r) BENCH_CUDA(cudaEventElapsedTime(&t[size_t(r)], at(r, v, 0), at(r, v, 1)));
    out.push_back(summarize(std::move(t)));
  }
  return out;
}

Timing per_call(Timing t, int calls) {
  t.median_ms /= calls, t.min_ms /= calls, t.max_ms /= calls;
  return t;
}
}  // namespace

Timing time_events(const std::function<void(int)>& fn, cudaStream_t stream, int warmup, int reps) {
  return time_rounds({fn}, stream, warmup, reps).front();
}

Timing time_graph(const std::function<void(int)>& fn, cudaStream_t stream, int calls, int warmup, int reps) {
  const CallGraph g(fn, stream, calls);
  return per_call(time_rounds({[&g](int) { g.launch(); }}, stream, warmup, reps).front(), calls);
}

std::vector<Timing> time_interleaved(const std::vector<std::function<void(int)>>& fns, cudaStream_t stream, Method m,
                                     int warmup, int reps) {
  if (!m.is_graph()) return time_rounds(fns, stream, warmup, reps);
  // One timed slot of a variant is one replay of its graph of calls.
  std::vector<std::unique_ptr<CallGraph>> graphs;
  std::vector<std::function<void(int)>> units;
  for (const auto& fn : fns) {
    graphs.push_back(std::make_unique<CallGraph>(fn, stream, m.graph_calls));
    units.push_back([g = graphs.back().get()](int) { g->launch(); });
  }
  std::vector<Timing> t = time_rounds(units, stream, warmup, reps);
  for (Timing& x : t) x = per_call(x, m.graph_calls);
  return t;
}

std::vector<uint16_t> host_bits(const testing::DeviceBuffer<uint16_t>& d) {
  std::vector<uint16_t> h(d.size());
  testing::to_host(d, h.data());
  return h;
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

int gpu_exit_status(const char* program) {
  if (!testing::has_cuda_device()) {
    std::fprintf(stderr,
                 "%s: no CUDA device found; it needs an NVIDIA GPU of compute capability >= 8.0. Nothing was run "
                 "(exit %d).\n",
                 program, kExitNoGpu);
    return kExitNoGpu;
  }
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    std::fprintf(stderr, "%s: cannot query CUDA device properties. Nothing was run (exit 2).\n", program);
    return 2;
  }
  if (p.major < 8) {
    std::fprintf(stderr,
                 "%s: device %d (%s) has compute capability %d.%d; it needs >= 8.0. Nothing was run (exit 2).\n",
                 program, dev, p.name, p.major, p.minor);
    return 2;
  }
  return 0;
}

bool require_gpu(const char* program) { return gpu_exit_status(program) == 0; }

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// ---- Bench --------------------------------------------------------------------------------------
Bench::Bench(std::string name, const BenchSettings& s) : name_(std::move(name)), s_(s) {
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  int id = 0;
  BENCH_CUDA(cudaGetDevice(&id));
  cudaDeviceProp p{};
  BENCH_CUDA(cudaGetDeviceProperties(&p, id));
  dev_ = {p.name, std::to_string(p.major) + "." + std::to_string(p.minor), p.major, p.minor, p.multiProcessorCount,
          p.l2CacheSize};
}

Bench::~Bench() {
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

cublasHandle_t Bench::cublas() {
  if (!cublas_) {
    BENCH_CUBLAS(cublasCreate(&cublas_));
    BENCH_CUBLAS(cublasSetStream(cublas_, stream_));
    cublas_ws_ = testing::DeviceBuffer<unsigned char>(32u << 20);
    BENCH_CUBLAS(cublasSetWorkspace(cublas_, cublas_ws_.data(), cublas_ws_.bytes()));
  }
  return cublas_;
}

void Bench::linear(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, DType in,
                   cudaDataType_t out) {
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) throw Error("linear: shape too large for cuBLAS int");
  const cudaDataType_t ct = in == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  const float one = 1.f, zero = 0.f;
  // Column-major view: yᵀ[N, M] = op(w) · xᵀ with w read as [K, N] and transposed, i.e. row-major
  // y[M, N] = x · wᵀ.
  BENCH_CUBLAS(cublasGemmEx(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &one, w, ct, int(K), x, ct,
                            int(K), &zero, y, out, int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

double Bench::copy_gbs() {
  if (!s_.ceilings) return 0;
  if (!copy_gbs_) {
    log("measuring the copy ceiling (1 GiB device copy)...");
    // 1 GiB each way: far beyond L2, so this is the DRAM rate a memory-bound kernel can hope for.
    const size_t bytes = size_t(1) << 30;
    testing::DeviceBuffer<unsigned char> a(bytes), b(bytes);
    BENCH_CUDA(cudaMemsetAsync(a.data(), 0x5a, bytes, stream_));
    BENCH_CUDA(cudaMemsetAsync(b.data(), 0xa5, bytes, stream_));
    const Timing t = time_events(
        [&](int i) {
          BENCH_CUDA(cudaMemcpyAsync(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), bytes,
                                     cudaMemcpyDeviceToDevice, stream_));
        },
        stream_, 3, 20);
    copy_gbs_ = 2.0 * double(bytes) / (t.median_ms * 1e-3) / 1e9;
    log("copy ceiling %.0f GB/s", *copy_gbs_);
  }
  return *copy_gbs_;
}

double Bench::matrix_tflops() {
  if (!s_.ceilings) return 0;
  if (!matrix_tflops_) {
    log("measuring the matrix ceiling (cuBLAS 8192^3 bf16)...");
    const int64_t n = 8192;
    testing::DeviceBuffer<uint16_t> a(size_t(n * n)), b(size_t(n * n)), c(size_t(n * n));
    // Random, non-zero operands: zeros draw less power and can run faster than real data.
    testing::fill_uniform(make_matrix(a.data(), DType::kBF16, n, n), -1.f, 1.f, 101, stream_);
    testing::fill_uniform(make_matrix(b.data(), DType::kBF16, n, n), -1.f, 1.f, 102, stream_);
    const Timing t = time_events([&](int) { linear(a.data(), b.data(), c.data(), n, n, n, DType::kBF16, CUDA_R_16BF); },
                                 stream_, 3, 20);
    matrix_tflops_ = 2.0 * double(n) * double(n) * double(n) / (t.median_ms * 1e-3) / 1e12;
    log("matrix ceiling %.0f TFLOP/s", *matrix_tflops_);
  }
  return *matrix_tflops_;
}

std::string Bench::pct_of_copy(double gbs) {
  const double c = copy_gbs();
  return c > 0 ? fmt(100 * gbs / c, 1) : "-";
}
std::string Bench::pct_of_matrix(double tflops) {
  const double c = matrix_tflops();
  return c > 0 ? fmt(100 * tflops / c, 1) : "-";
}

Timing Bench::time(const std::function<void(int)>& fn, Method m) {
  Timing t = m.is_graph() ? time_graph(fn, stream_, m.graph_calls, s_.warmup, s_.reps)
                          : time_events(fn, stream_, s_.warmup, s_.reps);
  BENCH_CUDA(cudaStreamSynchronize(stream_));
  BENCH_CUDA(cudaGetLastError());
  return t;
}

std::vector<Timing> Bench::time_all(const std::vector<std::function<void(int)>>& fns, Method m) {
  std::vector<Timing> t;
  if (s_.order == "sequential") {
    for (const auto& fn : fns) t.push_back(time(fn, m));
    return t;
  }
  t = time_interleaved(fns, stream_, m, s_.warmup, s_.reps);
  BENCH_CUDA(cudaStreamSynchronize(stream_));
  BENCH_CUDA(cudaGetLastError());
  return t;
}

Timing Bench::time_copy(size_t bytes, int sets, Method m) {
  std::vector<testing::DeviceBuffer<unsigned char>> src, dst;
  for (int i = 0; i < sets; ++i) src.emplace_back(bytes), dst.emplace_back(bytes);
  return time(
      [&](int i) {
        const size_t k = size_t(i % sets);
        BENCH_CUDA(cudaMemcpyAsync(dst[k].data(), src[k].data(), bytes, cudaMemcpyDeviceToDevice, stream_));
      },
      m);
}

bool Bench::verify(const std::string& point, const Check& c) {
  if (!c.ok) {
    ++failures_;
    log("VERIFY FAILED %s: %s", point.c_str(), c.what.c_str());
  }
  return c.ok;
}

bool Bench::fits(size_t bytes, const std::string& point) {
  size_t free_b = 0, total_b = 0;
  BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
  if (bytes + (size_t(256) << 20) <= free_b) return true;
  log("skip %s: needs %.1f GiB, %.1f GiB free", point.c_str(), bytes / 1073741824.0, free_b / 1073741824.0);
  ++skipped_;
  return false;
}

void Bench::log(const char* format, ...) {
  std::fprintf(stderr, "[%s] ", name_.c_str());
  va_list ap;
  va_start(ap, format);
  std::vfprintf(stderr, format, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
}

void Bench::columns(std::vector<std::string> headers) { headers_ = std::move(headers); }

Bench::Row Bench::row(std::vector<std::string> cells) {
  cells_.push_back(std::move(cells));
  Json r = Json::object();
  r["benchmark"] = name_;
  r["device"] = dev_.name;
  r["compute_capability"] = dev_.cc;
  rows_.push_back(std::move(r));
  return Row(rows_.back());
}

namespace {
void print_table(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w(headers.size());
  for (size_t i = 0; i < headers.size(); ++i) w[i] = headers[i].size();
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  auto line = [&](const std::vector<std::string>& r) {
    // First column (names) left-aligned, the figures right-aligned so digits line up.
    for (size_t i = 0; i < w.size(); ++i)
      std::printf(i ? "  %*s" : "%-*s", int(w[i]), i < r.size() ? r[i].c_str() : "");
    std::printf("\n");
  };
  line(headers);
  size_t total = 0;
  for (auto x : w) total += x + 2;
  std::printf("%s\n", std::string(total > 2 ? total - 2 : 0, '-').c_str());
  for (const auto& r : rows) line(r);
}
}  // namespace

int Bench::finish() {
  std::printf("\n");
  for (const auto& t : titles_) std::printf("%s\n", t.c_str());
  if (!headers_.empty()) print_table(headers_, cells_);
  if (skipped_) std::printf("(%d point(s) skipped for memory; see stderr)\n", skipped_);
  if (!s_.json.empty()) {
    Json out = Json::object();
    out["benchmark"] = name_;
    out["device"] = dev_.name;
    out["compute_capability"] = dev_.cc;
    out["sm_count"] = dev_.sms;
    out["date"] = now_iso8601();
    out["reps"] = s_.reps;
    out["warmup"] = s_.warmup;
    out["pdl"] = s_.pdl == "on";
    out["order"] = s_.order;
    out["points"] = rows_.size();
    out["skipped"] = skipped_;
    out["all_verified"] = failures_ == 0;
    if (copy_gbs_) out["copy_ceiling_gbs"] = *copy_gbs_;
    if (matrix_tflops_) out["matrix_ceiling_tflops"] = *matrix_tflops_;
    for (auto it = info_.begin(); it != info_.end(); ++it) out[it.key()] = it.value();
    out["rows"] = rows_;
    std::ofstream f(s_.json);
    // Non-finite figures (a failed point) become null, as JSON has no NaN.
    f << out.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
    f.close();
    if (!f) throw Error("cannot write " + s_.json);
    log("wrote %s", s_.json.c_str());
  }
  if (failures_) {
    std::fprintf(stderr, "blockfuse bench %s: verification FAILED (see above)\n", name_.c_str());
    return 1;
  }
  return 0;
}

// ---- BenchCommand -------------------------------------------------------------------------------
void BenchCommand::declare(Options& o) {
  const Defaults d = defaults();
  s_.reps = d.reps;
  s_.warmup = d.warmup;
  o.flag("--quick", s_.quick, "a few representative points, fewer repetitions (explicit options win)");
  o.integer("--reps", s_.reps, 1, 1000000, "timed repetitions per variant, median reported", d.quick_reps);
  o.integer("--warmup", s_.warmup, 0, 1000000, "untimed calls first");
  o.path("--json", s_.json, "write the run and its rows as JSON");
  o.app().add_flag_callback("--no-ceilings", [this] { s_.ceilings = false; },
                            "skip measuring the copy-bandwidth and cuBLAS ceilings");
  o.choice("--pdl", s_.pdl, {"on", "off"},
           "programmatic dependent launch of the memory-bound kernels (sm_90+; blockfuse/common.h): off times "
           "them launched plainly");
  if (compares_variants())
    o.choice("--order", s_.order, {"interleaved", "sequential"},
             "how a point's compared variants are timed: interleaved rounds, each variant once a round in an order "
             "rotated every round (the same clocks for all), or each variant's repetitions in turn");
  options(o);
}

int BenchCommand::execute(const std::string& name) {
  const std::string program = "blockfuse bench " + name;
  if (const int rc = gpu_exit_status(program.c_str())) return rc;
  set_programmatic_dependent_launch(s_.pdl == "on");
  Bench b(name, s_);
  run(b);
  return b.finish();
}

}  // namespace blockfuse::bench
