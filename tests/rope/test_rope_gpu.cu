// GPU tests of blockfuse::rope against the fp64 reference (rope/reference.h), every element, on fresh
// random inputs (never zeros) and NaN-poisoned outputs: both dtypes, forward and backward, head dims
// 64 / 128 / 256, one table for every sequence and one per sequence, padded strides (the padding left
// untouched), Hugging Face's transposed query layout, in place, odd sizes (1 position, 1 head, 7
// positions x 3 heads). Skips, saying so, without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "blockfuse/rope.h"
#include "rope/reference.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::DeviceMatrix;
using testing::HostMatrix;

struct Case {
  DType dt;
  int64_t batch, seqlen, heads, d;
  bool per_sequence_tables, backward, in_place;
  int64_t pad = 8;  // elements after each head's row (the head stride is d + pad)
};

void run(const Case& c) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(std::string(dtype_name(c.dt)) + " B " + std::to_string(c.batch) + " S " + std::to_string(c.seqlen) +
               " H " + std::to_string(c.heads) + " D " + std::to_string(c.d) + (c.backward ? " backward" : " forward") +
               (c.per_sequence_tables ? " tables per sequence" : "") + (c.in_place ? " in place" : "") + " " +
               testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const int64_t rows = c.batch * c.seqlen * c.heads, ld = c.d + c.pad;
  // x as [B, S, H, D] rows of ld elements: head stride ld, position stride H·ld, batch stride S·H·ld.
  HostMatrix x(c.dt, rows, c.d, ld), out(c.dt, rows, c.d, ld);
  x.fill_uniform(rng, -3.f, 3.f);
  out.poison();
  const int64_t tb = c.per_sequence_tables ? c.batch : 1;
  HostMatrix cs(c.dt, tb * c.seqlen, c.d, ld), sn(c.dt, tb * c.seqlen, c.d, ld);
  cs.fill_uniform(rng, -1.f, 1.f);
  sn.fill_uniform(rng, -1.f, 1.f);
  const DeviceMatrix d_x(x), d_out(out), d_cs(cs), d_sn(sn);
  const AttnTensor xv{d_x.data(), c.dt, c.batch, c.seqlen, c.heads, c.d, c.seqlen * c.heads * ld, c.heads * ld, ld};
  AttnTensor ov = xv;
  if (!c.in_place) ov.data = d_out.data();
  const RopeTables t{d_cs.data(), d_sn.data(), tb, c.seqlen * ld, ld};
  rope(xv, ov, t, c.backward);
  BF_CUDA_OK(cudaDeviceSynchronize());
  HostMatrix got(c.dt, rows, c.d, ld);
  (c.in_place ? d_x : d_out).to_host(got);

  std::vector<double> want(size_t(rows * c.d));
  std::vector<float> xr(size_t(c.d)), cr(size_t(c.d)), sr(size_t(c.d));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = (r / c.heads) % c.seqlen, b = r / (c.heads * c.seqlen);
    const int64_t trow = (c.per_sequence_tables ? b * c.seqlen : 0) + pos;
    for (int64_t i = 0; i < c.d; ++i) xr[size_t(i)] = x.at(r, i), cr[size_t(i)] = cs.at(trow, i), sr[size_t(i)] = sn.at(trow, i);
    reference::rope_row(xr.data(), cr.data(), sr.data(), c.d, c.backward, want.data() + r * c.d);
  }
  // fp32 products and one fma, one output rounding.
  testing::expect_close(testing::compare_host(rows, c.d, [&](int64_t r, int64_t i) { return got.at(r, i); },
                                              [&](int64_t r, int64_t i) { return want[size_t(r * c.d + i)]; },
                                              testing::Tolerance{1e-6, 2 * testing::unit_roundoff(c.dt)}),
                        "rope");
  int64_t touched = 0;  // the padding keeps the HostMatrix sentinel (or x's, in place)
  const HostMatrix& before = c.in_place ? x : out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = c.d; i < ld; ++i) touched += got.bits[size_t(r * ld + i)] != before.bits[size_t(r * ld + i)];
  EXPECT_EQ(touched, 0);
}

TEST(RopeGpu, ForwardBackwardShapesLayouts) {
  BF_SKIP_WITHOUT_GPU("rope");
  for (DType dt : {DType::kBF16, DType::kFP16})
    for (bool backward : {false, true}) {
      run({dt, 2, 37, 4, 128, false, backward, false});
      run({dt, 3, 7, 3, 64, true, backward, false});
      run({dt, 1, 1, 1, 256, false, backward, true});
      run({dt, 2, 129, 8, 128, true, backward, true, 0});
    }
}

TEST(RopeGpu, HostMemoryIsRefused) {
  BF_SKIP_WITHOUT_GPU("rope");
  HostMatrix x(DType::kBF16, 4, 64), tab(DType::kBF16, 1, 64);
  const DeviceMatrix d_x(x), d_t(tab);
  const AttnTensor xv = make_attn_tensor(static_cast<void*>(d_x.data()), DType::kBF16, 1, 1, 4, 64);
  const RopeTables host_tables{tab.bits.data(), d_t.data(), 1, 0, 64};
  testing::expect_arg_error([&] { rope(xv, xv, host_tables, false); }, "tables.cos");
  const AttnTensor hv = make_attn_tensor(static_cast<void*>(x.bits.data()), DType::kBF16, 1, 1, 4, 64);
  const RopeTables tables{d_t.data(), d_t.data(), 1, 0, 64};
  testing::expect_arg_error([&] { rope(hv, xv, tables, false); }, "x");
}

// The compute-sanitizer set (scripts/sanitize).
TEST(RopeSanitizer, SmallCases) {
  BF_SKIP_WITHOUT_GPU("rope");
  run({DType::kBF16, 2, 5, 3, 64, true, false, false});
  run({DType::kFP16, 1, 3, 2, 128, false, true, true});
}

}  // namespace
}  // namespace blockfuse
