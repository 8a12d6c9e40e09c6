// `blockfuse bench rope`: the rotary embedding (blockfuse::rope, forward) over Hugging Face-shaped
// query and key states, [1, S, H, D] bf16, out of place, in µs and GB/s against the device copy of
// the same bytes measured in the same run. Bytes counted = read x + write out (the cos / sin rows,
// S · D · 4 bytes, are 1/H of that and mostly L2 hits). Inputs rotated past L2, CUDA events around
// each call. Before a point is timed, its first and last rows are checked against the fp64 reference
// (rope/reference.h); a failure makes the command exit 1.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "blockfuse/rope.h"
#include "common/host_float.h"
#include "harness.h"
#include "rope/reference.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

using testing::DeviceBuffer;

class RopeBench final : public BenchCommand {
  std::vector<int64_t> seqlens_ = {4096, 16384}, heads_ = {32, 8};
  int d_ = 128;

  Defaults defaults() const override { return {30, 10, 3}; }

  void options(Options& o) override {
    o.about("µs and GB/s of blockfuse::rope (Hugging Face's rotary embedding, forward, out of place) over [1, S, H, D] "
            "bf16 states and the fraction of the device-copy bandwidth measured in the same run; verified against "
            "fp64 first.");
    o.ints("--seqlen", seqlens_, 1, int64_t{1} << 20, "positions S", std::vector<int64_t>{4096});
    o.ints("--heads", heads_, 1, 4096, "heads H (32: Llama-3-8B's queries, 8: its keys)", std::vector<int64_t>{32});
    o.integer("--d", d_, 64, 256, "head dim (64, 128, 256)");
  }

  void run(Bench& b) override {
    if (d_ != 64 && d_ != 128 && d_ != 256) throw Error("--d: " + std::to_string(d_) + " is not 64, 128 or 256");
    b.title("blockfuse bench rope — " + b.device().name + ", bf16, D " + std::to_string(d_) + "; median of " +
            std::to_string(b.reps()) + "; bytes = read x + write out");
    if (b.copy_gbs() > 0) b.title("device copy this run: " + fmt(b.copy_gbs(), 0) + " GB/s (read + write)");
    b.columns({"S", "H", "us", "GB/s", "%copy", "%same-size copy", "verified"});
    for (int64_t s : seqlens_)
      for (int64_t h : heads_) point(b, s, h);
  }

  void point(Bench& b, int64_t S, int64_t H) {
    const DType dt = DType::kBF16;
    const int64_t D = d_, rows = S * H;
    const std::string where = "S " + std::to_string(S) + " H " + std::to_string(H);
    const int64_t bytes_one = rows * D * 2;
    const int sets = rotation_sets(2 * bytes_one, 8);
    if (!b.fits(size_t(sets) * size_t(bytes_one) + size_t(bytes_one) + size_t(4 * S * D), where)) return;
    const cudaStream_t st = b.stream();
    std::vector<DeviceBuffer<uint16_t>> x;
    for (int i = 0; i < sets; ++i) {
      x.emplace_back(size_t(rows * D));
      testing::fill_uniform(make_matrix(x.back().data(), dt, rows, D), -3.f, 3.f, 31 + uint64_t(i), st);
    }
    DeviceBuffer<uint16_t> out(size_t(rows * D)), cs(size_t(S * D)), sn(size_t(S * D));
    testing::fill_uniform(make_matrix(cs.data(), dt, S, D), -1.f, 1.f, 5, st);
    testing::fill_uniform(make_matrix(sn.data(), dt, S, D), -1.f, 1.f, 6, st);
    const RopeTables tables{cs.data(), sn.data(), 1, 0, D};
    const AttnTensor ov = make_attn_tensor(static_cast<void*>(out.data()), dt, 1, S, H, D);
    auto call = [&](int c) {
      rope(make_attn_tensor(static_cast<const void*>(x[size_t(c % sets)].data()), dt, 1, S, H, D), ov, tables, false, st);
    };

    call(0);
    BENCH_CUDA(cudaStreamSynchronize(st));
    std::vector<uint16_t> hx(size_t(rows * D)), ho(size_t(rows * D)), hc(size_t(S * D)), hs(size_t(S * D));
    testing::to_host(x[0], hx.data());
    testing::to_host(out, ho.data());
    testing::to_host(cs, hc.data());
    testing::to_host(sn, hs.data());
    Check check;
    const int64_t band = std::min<int64_t>(4 * H, rows);
    std::vector<float> xr(static_cast<size_t>(D)), cr(static_cast<size_t>(D)), sr(static_cast<size_t>(D));
    for (int64_t r0 : {int64_t{0}, rows - band}) {
      std::vector<double> ref(size_t(band * D));
      for (int64_t r = 0; r < band; ++r) {
        const int64_t row = r0 + r, pos = row / H;
        for (int64_t i = 0; i < D; ++i)
          xr[size_t(i)] = host::to_float(dt, hx[size_t(row * D + i)]), cr[size_t(i)] = host::to_float(dt, hc[size_t(pos * D + i)]),
          sr[size_t(i)] = host::to_float(dt, hs[size_t(pos * D + i)]);
        reference::rope_row(xr.data(), cr.data(), sr.data(), D, false, ref.data() + r * D);
      }
      check += to_check(testing::compare_host(band, D,
                                              [&](int64_t r, int64_t i) { return host::to_float(dt, ho[size_t((r0 + r) * D + i)]); },
                                              [&](int64_t r, int64_t i) { return ref[size_t(r * D + i)]; },
                                              testing::Tolerance{1e-6, 2 * testing::unit_roundoff(dt)}),
                        1e-2, r0);
    }
    const bool ok = b.verify(where, check);

    const Method method = Method::events();
    const Timing t = b.time(call, method);
    const double bytes = double(2 * bytes_one);
    const Timing tc = b.time_copy(size_t(bytes_one), sets, method);
    const double gbs = bytes / (t.median_ms * 1e6), cgbs = bytes / (tc.median_ms * 1e6);
    auto r = b.row({std::to_string(S), std::to_string(H), fmt(t.us(), 1), fmt(gbs, 0), b.pct_of_copy(gbs),
                    fmt(100 * gbs / cgbs, 1), ok ? "ok" : "FAILED"});
    r.set("seqlen", S).set("heads", H).set("head_dim", D).set("dtype", "bf16").set("bytes", int64_t(bytes));
    r.set("us", t.us()).set("gbs", gbs).set("same_size_copy_us", tc.us()).set("frac_of_same_size_copy", gbs / cgbs);
    r.set("rotation_sets", sets).set("timing", "cuda events, rotated inputs");
    r.verification(ok, check);
  }
};

}  // namespace

BLOCKFUSE_COMMAND(RopeBench, "bench rope", "GB/s of rope (the rotary embedding) vs the device copy (--seqlen, --heads, --d, --json)");

}  // namespace blockfuse::bench
