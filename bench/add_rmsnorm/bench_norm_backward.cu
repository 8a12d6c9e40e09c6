// `blockfuse bench norm-backward`: the RMSNorm backward (rmsnorm_backward, and add_rmsnorm_backward
// with the residual stream's gradient) in µs, GB/s and the fraction of the device copy measured in
// the same run, the training issue's target (>= 90 % of copy from 2048 rows).
// Bytes counted = the minimum traffic: read dy, h (and d_residual_out) [M, H] and the weight, write
// dh [M, H] and dweight [H]. The per-CTA dweight partials (rmsnorm_backward_ctas(M) x H fp32,
// written and read back by the reduction) are the kernel's own cost and are not counted.
// Inputs rotated over sets spanning L2 several times, CUDA events around each call. Each point also
// times a same-size device copy ("%same-size copy").
// Before a point is timed, dh (rows 0..7 and the last 8) and the whole dweight of the first input set
// are checked against the fp64 CPU reference (src/add_rmsnorm/reference.h) with the GPU tests'
// tolerances (tests/add_rmsnorm/test_rmsnorm_backward_gpu.cu); a failure makes the command exit 1.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "add_rmsnorm/params.h"
#include "add_rmsnorm/reference.h"
#include "blockfuse/add_rmsnorm.h"
#include "common/host_float.h"
#include "harness.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

using testing::DeviceBuffer;

class NormBackwardBench final : public BenchCommand {
  std::vector<int64_t> rows_ = {2048, 8192, 32768}, hidden_ = {4096, 8192};
  std::vector<std::string> kinds_ = {"rmsnorm", "add_rmsnorm"};
  std::string dtype_ = "bf16";
  bool gemma_ = false;
  bool two_kernels_ = false;

  Defaults defaults() const override { return {50, 20, 5}; }

  void options(Options& o) override {
    o.about("µs and GB/s of blockfuse::rmsnorm_backward / add_rmsnorm_backward (dh and dweight) and the "
            "fraction of the device-copy bandwidth measured in the same run; verified against the fp64 "
            "CPU reference first.");
    o.ints("--rows", rows_, 1, int64_t{1} << 24, "rows M", std::vector<int64_t>{2048, 8192});
    o.ints("--hidden", hidden_, 8, int64_t{1} << 20, "H (a multiple of 8)", std::vector<int64_t>{4096}, 8);
    o.words("--kind", kinds_, {"rmsnorm", "add_rmsnorm"},
            "rmsnorm: dy, x -> dx, dweight; add_rmsnorm: dy and d_residual_out, h -> dh, dweight");
    o.choice("--dtype", dtype_, {"bf16", "fp16"}, "element type");
    o.flag("--gemma", gemma_, "Gemma's (1 + w) weight");
    o.flag("--two-kernels", two_kernels_,
           "add the dweight partials in the second kernel everywhere (not inside the row kernel after a grid-wide "
           "barrier where every CTA is resident: H <= 4096)");
  }

  void run(Bench& b) override {
    const DType dt = dtype_ == "fp16" ? DType::kFP16 : DType::kBF16;
    b.title("blockfuse bench norm-backward — " + b.device().name + ", " + dtype_ + (gemma_ ? ", Gemma (1 + w)" : "") +
            "; median of " + std::to_string(b.reps()) +
            "; bytes = read dy, h (, d_residual_out) + write dh (+ weight, dweight)");
    if (b.copy_gbs() > 0) b.title("device copy this run: " + fmt(b.copy_gbs(), 0) + " GB/s (read + write)");
    detail::set_rmsnorm_backward_fused_reduce(!two_kernels_);
    b.columns({"kind", "H", "M", "dweight sum", "us", "GB/s", "%copy", "%same-size copy", "verified"});
    b.info()["copy_ceiling_gbs"] = b.copy_gbs();
    b.info()["dtype"] = dtype_;
    for (const std::string& kind : kinds_)
      for (int64_t h : hidden_)
        for (int64_t m : rows_) point(b, kind == "add_rmsnorm", m, h, dt);
  }

  void point(Bench& b, bool add, int64_t M, int64_t H, DType dt) {
    const std::string where = std::string(add ? "add_rmsnorm" : "rmsnorm") + " H " + std::to_string(H) + " M " +
                              std::to_string(M);
    const int64_t mat = M * H * 2;  // bytes of one [M, H] matrix
    const int64_t io_bytes = (add ? 4 : 3) * mat;
    const size_t ws_bytes = rmsnorm_backward_workspace_bytes(M, H);
    const int sets = rotation_sets(io_bytes, 8);
    if (!b.fits(size_t(sets * io_bytes) + ws_bytes + size_t(4 * H), where)) return;
    const cudaStream_t s = b.stream();
    std::vector<DeviceBuffer<uint16_t>> dy, hs, dres, dh;
    for (int i = 0; i < sets; ++i) {
      dy.emplace_back(size_t(M * H));
      hs.emplace_back(size_t(M * H));
      dh.emplace_back(size_t(M * H));
      testing::fill_uniform(make_matrix(dy.back().data(), dt, M, H), -2.f, 2.f, 31 + uint64_t(i), s);
      testing::fill_uniform(make_matrix(hs.back().data(), dt, M, H), -2.f, 2.f, 47 + uint64_t(i), s);
      if (add) {
        dres.emplace_back(size_t(M * H));
        testing::fill_uniform(make_matrix(dres.back().data(), dt, M, H), -1.f, 1.f, 59 + uint64_t(i), s);
      }
    }
    DeviceBuffer<uint16_t> w{size_t(H)}, dw{size_t(H)};
    testing::fill_uniform(make_matrix(w.data(), dt, 1, H), gemma_ ? -1.f : -2.f, gemma_ ? 1.f : 2.f, 71, s);
    DeviceBuffer<unsigned char> ws{ws_bytes};
    RmsNormOptions opt;
    opt.gemma_one_plus_w = gemma_;
    auto call = [&](int c) {
      const size_t i = size_t(c % sets);
      const ConstMatrix dyv = make_matrix(static_cast<const void*>(dy[i].data()), dt, M, H);
      const ConstMatrix hv = make_matrix(static_cast<const void*>(hs[i].data()), dt, M, H);
      const ConstMatrix wv = make_matrix(static_cast<const void*>(w.data()), dt, 1, H);
      const Matrix dhv = make_matrix(dh[i].data(), dt, M, H), dwv = make_matrix(dw.data(), dt, 1, H);
      if (add)
        add_rmsnorm_backward(dyv, make_matrix(static_cast<const void*>(dres[i].data()), dt, M, H), hv, wv, dhv, dwv,
                             ws.data(), ws_bytes, opt, s);
      else
        rmsnorm_backward(dyv, hv, wv, dhv, dwv, ws.data(), ws_bytes, opt, s);
    };

    // Verify set 0 first, on poisoned outputs.
    testing::fill_bits(make_matrix(dh[0].data(), dt, M, H), testing::nan_bits(dt), s);
    testing::fill_bits(make_matrix(dw.data(), dt, 1, H), testing::nan_bits(dt), s);
    call(0);
    BENCH_CUDA(cudaStreamSynchronize(s));
    const std::vector<uint16_t> dy0 = host_bits(dy[0]), h0 = host_bits(hs[0]), w0 = host_bits(w),
                                dh0 = host_bits(dh[0]), dw0 = host_bits(dw);
    const std::vector<uint16_t> dr0 = add ? host_bits(dres[0]) : std::vector<uint16_t>{};
    std::vector<double> dw_ref(static_cast<size_t>(H));
    reference::rmsnorm_backward(dt, M, H, dy0.data(), H, add ? dr0.data() : nullptr, H, h0.data(), H, w0.data(),
                                opt.eps, gemma_, nullptr, dw_ref.data());
    const int64_t band = std::min<int64_t>(8, M);
    const testing::Tolerance dh_tol{1e-4, 2 * testing::unit_roundoff(dt)};
    Check check;
    for (int64_t r0 : {int64_t{0}, M - band}) {  // the first and the last rows
      std::vector<double> ref(size_t(band * H));
      const size_t at = size_t(r0 * H);
      reference::rmsnorm_backward(dt, band, H, dy0.data() + at, H, add ? dr0.data() + at : nullptr, H, h0.data() + at,
                                  H, w0.data(), opt.eps, gemma_, ref.data(), nullptr);
      check += to_check(testing::compare_host(band, H, [&](int64_t r, int64_t i) { return host::to_float(dt, dh0[at + size_t(r * H + i)]); },
                                              [&](int64_t r, int64_t i) { return ref[size_t(r * H + i)]; }, dh_tol),
                        1e-2, r0);
    }
    const testing::Tolerance dw_tol{1e-5 * double(M) + 1e-5, 2 * testing::unit_roundoff(dt)};
    check += to_check(testing::compare_host(1, H, [&](int64_t, int64_t i) { return host::to_float(dt, dw0[size_t(i)]); },
                                            [&](int64_t, int64_t i) { return dw_ref[size_t(i)]; }, dw_tol));
    const bool ok = b.verify(where, check);

    const Method method = Method::events();
    const Timing t = b.time(call, method);
    const double bytes = double(io_bytes + 2 * 2 * H);  // + the weight read and dweight written
    const Timing tc = b.time_copy(size_t(bytes / 2), sets, method);
    const double gbs = bytes / (t.median_ms * 1e6), cgbs = double(2 * size_t(bytes / 2)) / (tc.median_ms * 1e6);
    const bool fused = detail::rmsnorm_backward_fused_reduce_applies(M, H, add);
    auto r = b.row({add ? "add_rmsnorm" : "rmsnorm", std::to_string(H), std::to_string(M), fused ? "in-kernel" : "2nd kernel",
                    fmt(t.us(), 2), fmt(gbs, 0),
                    b.pct_of_copy(gbs), fmt(100 * gbs / cgbs, 1), ok ? "ok" : "FAILED"});
    r.set("kind", add ? "add_rmsnorm" : "rmsnorm").set("H", H).set("M", M).set("dtype", dtype_).set("gemma", gemma_);
    r.set("bytes", int64_t(bytes)).set("us", t.us()).set("min_us", t.min_us()).set("gbs", gbs);
    r.set("fused_reduction", fused).set("ctas", rmsnorm_backward_ctas(M)).set("rotation_sets", sets).set("timing", "cuda events, rotated inputs");
    r.set("same_size_copy_us", tc.us()).set("same_size_copy_gbs", cgbs).set("frac_of_same_size_copy", gbs / cgbs);
    if (b.copy_gbs() > 0) r.set("frac_of_copy", gbs / b.copy_gbs());
    r.verification(ok, check);
  }
};

}  // namespace

BLOCKFUSE_COMMAND(NormBackwardBench, "bench norm-backward",
                  "GB/s of rmsnorm_backward / add_rmsnorm_backward vs the device copy (--rows, --hidden, --kind, --json)");

}  // namespace blockfuse::bench
