// `blockfuse bench cross-entropy`: the cross-entropy loss and gradient kernel over [M, V] logits
// (bf16, the gradient written over them) in µs and GB/s against the device copy measured in the same
// run. Bytes counted = the minimum traffic: read the logits once and write the gradient once (the
// kernel reads each row twice; a row re-read from L2 costs no DRAM traffic). Inputs rotated past L2,
// CUDA events around each call. Before a point is timed, the first and last 4 rows' loss and
// gradient are checked against the fp64 reference (cross_entropy/reference.h) with the GPU tests'
// tolerances; a failure makes the command exit 1.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "blockfuse/cross_entropy.h"
#include "common/host_float.h"
#include "cross_entropy/reference.h"
#include "harness.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

using testing::DeviceBuffer;

class CrossEntropyBench final : public BenchCommand {
  std::vector<int64_t> rows_ = {1024, 4096}, vocab_ = {32000, 128256};

  Defaults defaults() const override { return {30, 10, 3}; }

  void options(Options& o) override {
    o.about("µs and GB/s of blockfuse::cross_entropy_forward_backward (loss and gradient over bf16 logits) and the "
            "fraction of the device-copy bandwidth measured in the same run; verified against fp64 first.");
    o.ints("--rows", rows_, 1, int64_t{1} << 20, "rows M (tokens)", std::vector<int64_t>{1024});
    o.ints("--vocab", vocab_, 8, int64_t{1} << 22, "V (a multiple of 8)", std::vector<int64_t>{128256}, 8);
  }

  void run(Bench& b) override {
    b.title("blockfuse bench cross-entropy — " + b.device().name + ", bf16; median of " + std::to_string(b.reps()) +
            "; bytes = read the logits + write the gradient");
    if (b.copy_gbs() > 0) b.title("device copy this run: " + fmt(b.copy_gbs(), 0) + " GB/s (read + write)");
    b.columns({"V", "M", "us", "GB/s", "%copy", "%same-size copy", "verified"});
    for (int64_t v : vocab_)
      for (int64_t m : rows_) point(b, m, v);
  }

  void point(Bench& b, int64_t M, int64_t V) {
    const DType dt = DType::kBF16;
    const std::string where = "V " + std::to_string(V) + " M " + std::to_string(M);
    const int64_t mat = M * V * 2;
    const int sets = rotation_sets(mat, 8);
    if (!b.fits(size_t(sets * mat) + size_t(M * 12), where)) return;
    const cudaStream_t s = b.stream();
    std::vector<DeviceBuffer<uint16_t>> x;
    for (int i = 0; i < sets; ++i) {
      x.emplace_back(size_t(M * V));
      testing::fill_uniform(make_matrix(x.back().data(), dt, M, V), -6.f, 6.f, 17 + uint64_t(i), s);
    }
    std::vector<int64_t> labels(static_cast<size_t>(M));
    for (int64_t r = 0; r < M; ++r) labels[size_t(r)] = (r * 7919) % V;
    if (M > 2) labels[1] = -100;
    auto d_labels = testing::to_device(labels.data(), labels.size() * sizeof(int64_t));
    const float scale = 1.f / float(M);
    auto d_scale = testing::to_device(&scale, sizeof(float));
    DeviceBuffer<float> loss(static_cast<size_t>(M));
    auto call = [&](int c) {
      cross_entropy_forward_backward(make_matrix(x[size_t(c % sets)].data(), dt, M, V),
                                     reinterpret_cast<const int64_t*>(d_labels.data()), -100, loss.data(),
                                     reinterpret_cast<const float*>(d_scale.data()), s);
    };

    // Verify on set 0 (its logits are overwritten: refilled before timing).
    std::vector<uint16_t> before(size_t(M * V));
    testing::to_host(x[0], before.data());
    call(0);
    BENCH_CUDA(cudaStreamSynchronize(s));
    std::vector<uint16_t> after(size_t(M * V));
    testing::to_host(x[0], after.data());
    std::vector<float> got_loss(static_cast<size_t>(M));
    testing::to_host(loss, got_loss.data());
    Check check;
    const int64_t band = std::min<int64_t>(4, M);
    for (int64_t r0 : {int64_t{0}, M - band}) {
      std::vector<float> xf(size_t(band * V));
      for (int64_t i = 0; i < band * V; ++i) xf[size_t(i)] = host::to_float(dt, before[size_t(r0 * V + i)]);
      std::vector<double> ref_loss, ref_grad;
      reference::cross_entropy(xf.data(), band, V, V, labels.data() + r0, -100, scale, ref_loss, &ref_grad);
      check += to_check(testing::compare_host(band, 1, [&](int64_t r, int64_t) { return got_loss[size_t(r0 + r)]; },
                                              [&](int64_t r, int64_t) { return ref_loss[size_t(r)]; },
                                              testing::Tolerance{1e-4, 1e-5}),
                        1e-2, r0);
      check += to_check(testing::compare_host(band, V,
                                              [&](int64_t r, int64_t j) { return host::to_float(dt, after[size_t((r0 + r) * V + j)]); },
                                              [&](int64_t r, int64_t j) { return ref_grad[size_t(r * V + j)]; },
                                              testing::Tolerance{1e-7, 2 * testing::unit_roundoff(dt)}),
                        1e-2, r0);
    }
    const bool ok = b.verify(where, check);
    testing::fill_uniform(make_matrix(x[0].data(), dt, M, V), -6.f, 6.f, 17, s);

    const Method method = Method::events();
    const Timing t = b.time(call, method);
    const double bytes = double(2 * mat);
    const Timing tc = b.time_copy(size_t(mat), sets, method);
    const double gbs = bytes / (t.median_ms * 1e6), cgbs = bytes / (tc.median_ms * 1e6);
    auto r = b.row({std::to_string(V), std::to_string(M), fmt(t.us(), 1), fmt(gbs, 0), b.pct_of_copy(gbs),
                    fmt(100 * gbs / cgbs, 1), ok ? "ok" : "FAILED"});
    r.set("V", V).set("M", M).set("dtype", "bf16").set("bytes", int64_t(bytes)).set("us", t.us()).set("gbs", gbs);
    r.set("same_size_copy_us", tc.us()).set("frac_of_same_size_copy", gbs / cgbs).set("rotation_sets", sets);
    r.set("timing", "cuda events, rotated inputs (the gradient overwrites them: later calls see gradients, "
                    "the same traffic)");
    r.verification(ok, check);
  }
};

}  // namespace

BLOCKFUSE_COMMAND(CrossEntropyBench, "bench cross-entropy",
                  "GB/s of cross_entropy_forward_backward vs the device copy (--rows, --vocab, --json)");

}  // namespace blockfuse::bench
