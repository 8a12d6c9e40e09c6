// `blockfuse bench decode-attention`: blockfuse::decode_attention (split-KV, packed GQA rows) on
// the decode shapes of the benchmarking plan (docs: BENCHMARKING.md, "Decode attention"): bf16,
// Hq = 32, Hkv = 8 and 1, D = 128, one query token, B ∈ {1, 8, 32, 128} × cache length S ∈ {1024,
// 8192, 32768, 131072} where the cache fits, contiguous and paged (pages 16 and 64) caches.
//
// Memory-bound: the figure of merit is the K + V bytes read (2 · B · S · Hkv · D · 2) per second,
// against the device-to-device copy bandwidth measured in this run (harness: 1 GiB copy, read +
// written). Every sequence is full (cache_seqlens = S), so the bytes are the ones the kernel must
// read. Paged caches are shuffled: page i of sequence b at a random index, as a serving engine's
// allocator leaves them.
//
// Timing: --calls calls captured in one CUDA graph (a decoder step runs this inside a graph),
// replayed --reps times after --warmup, median per call. The caches are rotated over
// rotation_sets() copies (>= 3x L2 together; one copy when the cache alone is that large), call i
// of the graph reading copy i mod sets, so no call finds its keys in L2.
//
// Before timing, each point is verified: the output (poisoned first) of two (sequence, KV head)
// pairs, (0, 0) and (B − 1, Hkv − 1), against the fp64 CPU reference (attention/decode_reference.h)
// on those keys, gathered from the device; a failure makes the command exit 1.
//
// Output: progress on stderr, a table on stdout, with --json FILE the run and its rows.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention/decode_reference.h"
#include "blockfuse/decode_attention.h"
#include "common/device.h"
#include "common/host_float.h"
#include "harness.h"
#include "testing/device_buffer.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

using testing::DeviceBuffer;

// One copy of the cache (K and V) and, for a paged cache, its block table.
struct CacheSet {
  DeviceBuffer<uint16_t> k, v;
};

class DecodeAttentionBench final : public BenchCommand {
  std::vector<int64_t> batches_ = {1, 8, 32, 128}, seqlens_ = {1024, 8192, 32768, 131072}, hkvs_ = {8, 1},
                       pages_ = {0, 16, 64}, splits_ = {0};
  int hq_ = 32, d_ = 128, sq_ = 1, calls_ = 20;
  std::string dtype_ = "bf16", page_order_ = "shuffled";

  Defaults defaults() const override { return {30, 20, 5}; }

  void options(Options& o) override {
    o.about("GB/s of blockfuse::decode_attention (one decode step against a KV cache): K + V bytes read per second, "
            "as a fraction of the device copy bandwidth measured in this run. Full sequences (cache_seqlens = S); "
            "paged caches with shuffled block tables (or in order: --page-order). Per-call median of --calls calls captured in one CUDA graph, "
            "caches rotated past L2. Each point is verified against the fp64 CPU reference on two (sequence, KV "
            "head) pairs before it is timed.");
    o.ints("--batch", batches_, 1, 4096, "batch sizes B", std::vector<int64_t>{1, 32});
    o.ints("--seqlen", seqlens_, 1, int64_t{1} << 24, "cache lengths S (every sequence full)", std::vector<int64_t>{8192});
    o.ints("--hkv", hkvs_, 1, 256, "KV heads (Hq % Hkv == 0)", std::vector<int64_t>{8});
    o.ints("--page", pages_, 0, 1 << 20, "cache layouts: 0 = contiguous [B, S, Hkv, D], else the page size of a paged cache",
           std::vector<int64_t>{0, 16});
    o.ints("--splits", splits_, 0, kDecodeAttentionMaxSplits, "num_splits, one row per value (0 = the heuristic's)");
    o.integer("--hq", hq_, 1, 4096, "query heads");
    o.integer("--d", d_, 64, 256, "head dim (64, 128, 256)");
    o.integer("--sq", sq_, 1, int(kDecodeAttentionMaxSeqlenQ), "query tokens per sequence (speculative decoding: > 1, causal)");
    o.integer("--calls", calls_, 1, 1000, "calls per captured graph");
    o.choice("--dtype", dtype_, {"bf16", "fp16"}, "element type");
    o.choice("--page-order", page_order_, {"shuffled", "sequential"},
             "a paged cache's block table: pages at random indices (a serving engine's), or in order (page i of "
             "sequence b at b · max_blocks + i: the contiguous cache's addresses, to separate the paging's "
             "arithmetic from the scattered addresses' cost)");
  }

  void run(Bench& b) override {
    if (d_ != 64 && d_ != 128 && d_ != 256) throw Error("--d: " + std::to_string(d_) + " is not 64, 128 or 256");
    for (int64_t h : hkvs_)
      if (hq_ % h != 0) throw Error("--hkv: " + std::to_string(h) + " does not divide --hq " + std::to_string(hq_));
    const DType dt = dtype_ == "fp16" ? DType::kFP16 : DType::kBF16;
    const double copy = b.copy_gbs();
    b.title("blockfuse bench decode-attention — " + b.device().name + " (cc " + b.device().cc + ", " +
            std::to_string(b.device().sms) + " SMs), " + dtype_ + ", Hq " + std::to_string(hq_) + ", D " +
            std::to_string(d_) + ", Sq " + std::to_string(sq_) + "; copy bandwidth " + fmt(copy, 0) + " GB/s this run");
    b.title("per-call median of " + std::to_string(b.reps()) + " graph replays x " + std::to_string(calls_) +
            " calls (after " + std::to_string(b.warmup()) + " warm-up), caches rotated past L2; bytes = K + V read; "
            "splits * = the heuristic's; verified = max |diff| vs fp64 on 2 (sequence, KV head) pairs");
    b.columns({"B", "S", "Hkv", "cache", "splits", "us", "GB/s", "%copy", "verified"});
    b.info()["dtype"] = dtype_;
    b.info()["copy_gbs"] = copy;
    b.info()["heads_q"] = hq_;
    b.info()["head_dim"] = d_;
    b.info()["seqlen_q"] = sq_;
    b.info()["timing"] = "time_graph_per_call: calls captured in one CUDA graph, median of reps replays";
    for (int64_t hkv : hkvs_)
      for (int64_t s : seqlens_)
        for (int64_t B : batches_)
          for (int64_t page : pages_) point(b, dt, B, s, hkv, page);
  }

  // Host copy of the K or V rows of (sequence bi, KV head h), [S, D] contiguous, gathered page by page.
  std::vector<uint16_t> gather(const uint16_t* cache, int64_t bi, int64_t h, int64_t S, int64_t hkv, int64_t page,
                               const std::vector<int32_t>& table, int64_t max_blocks) const {
    std::vector<uint16_t> host(size_t(S * d_));
    const size_t row = size_t(d_) * 2, pitch = size_t(hkv * d_) * 2;
    if (page == 0) {
      BENCH_CUDA(cudaMemcpy2D(host.data(), row, cache + (bi * S * hkv + h) * d_, pitch, row, size_t(S), cudaMemcpyDeviceToHost));
      return host;
    }
    for (int64_t i = 0; i * page < S; ++i) {
      const int64_t rows = std::min(page, S - i * page);
      const int64_t blk = table[size_t(bi * max_blocks + i)];
      BENCH_CUDA(cudaMemcpy2D(host.data() + i * page * d_, row, cache + (blk * page * hkv + h) * d_, pitch, row,
                              size_t(rows), cudaMemcpyDeviceToHost));
    }
    return host;
  }

  // out of (sequence bi, KV head h): its first (at most 4) query heads against the fp64 reference.
  Check verify_pair(DType dt, const DeviceBuffer<uint16_t>& q, const DeviceBuffer<uint16_t>& out, const CacheSet& set,
                    int64_t bi, int64_t h, int64_t S, int64_t hkv, int64_t page, const std::vector<int32_t>& table,
                    int64_t max_blocks, const DecodeAttentionParams& p) const {
    const int64_t group = hq_ / hkv, heads = std::min<int64_t>(group, 4), Hq = hq_;
    const std::vector<uint16_t> hk = gather(set.k.data(), bi, h, S, hkv, page, table, max_blocks);
    const std::vector<uint16_t> hv = gather(set.v.data(), bi, h, S, hkv, page, table, max_blocks);
    // q and out rows of sequence bi, heads h·group .. + heads − 1, each query token.
    std::vector<uint16_t> hq(size_t(sq_ * heads * d_)), ho(hq.size());
    for (int64_t t = 0; t < sq_; ++t) {
      const int64_t src = ((bi * sq_ + t) * Hq + h * group) * d_;
      BENCH_CUDA(cudaMemcpy(hq.data() + t * heads * d_, q.data() + src, size_t(heads * d_) * 2, cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaMemcpy(ho.data() + t * heads * d_, out.data() + src, size_t(heads * d_) * 2, cudaMemcpyDeviceToHost));
    }
    const int32_t len = int32_t(S);
    DecodeAttentionParams rp;
    rp.causal = p.causal;
    const attn::DecodeReferenceInput in{make_attn_tensor(static_cast<const void*>(hq.data()), dt, 1, sq_, heads, d_),
                                        make_attn_tensor(static_cast<const void*>(hk.data()), dt, 1, S, 1, d_),
                                        make_attn_tensor(static_cast<const void*>(hv.data()), dt, 1, S, 1, d_), &len, nullptr};
    std::vector<double> ro, rl;
    attn::decode_attention_reference(in, rp, ro, rl);
    // As the tests: P rounded to the input type before P·V and O once at the end (|v| <= 1).
    const testing::Tolerance tol = testing::tolerance(dt, 2, 2 * testing::unit_roundoff(dt) + 1e-4);
    testing::CompareStats st;
    for (size_t i = 0; i < ho.size(); ++i)
      st.add(int64_t(i) / d_, int64_t(i) % d_, host::to_float(dt, ho[i]), ro[i], tol);
    return to_check(st);
  }

  void point(Bench& b, DType dt, int64_t B, int64_t S, int64_t hkv, int64_t page) {
    const cudaStream_t stream = b.stream();
    const bool sequential = page_order_ == "sequential";
    const std::string cache_s = page ? "page" + std::to_string(page) + (sequential ? "seq" : "") : "contig";
    const std::string where = "B " + std::to_string(B) + " S " + std::to_string(S) + " Hkv " + std::to_string(hkv) + " " + cache_s;
    const int64_t max_blocks = page ? (S + page - 1) / page : 0;
    const int64_t rows_per_seq = page ? max_blocks * page : S;
    const int64_t kv_elems = B * rows_per_seq * hkv * d_;  // one of K, V
    const double kv_bytes = 2.0 * 2.0 * double(B) * double(S) * double(hkv) * double(d_);  // K + V read per call
    const int sets = rotation_sets(int64_t(4 * kv_elems), 8);
    const size_t q_elems = size_t(B * sq_ * hq_ * d_);
    if (!b.fits(size_t(sets) * 4 * size_t(kv_elems) + 4 * q_elems, where + " (" + std::to_string(sets) + " cache copies)"))
      return;
    b.log("%s: %d cache cop%s", where.c_str(), sets, sets == 1 ? "y" : "ies");

    std::vector<CacheSet> caches(static_cast<size_t>(sets));
    for (int i = 0; i < sets; ++i) {
      caches[size_t(i)].k = DeviceBuffer<uint16_t>(size_t(kv_elems));
      caches[size_t(i)].v = DeviceBuffer<uint16_t>(size_t(kv_elems));
      const int64_t rows = B * rows_per_seq * hkv;
      testing::fill_uniform(Matrix{caches[size_t(i)].k.data(), dt, rows, d_, d_}, -2.f, 2.f, 1000 + 17 * uint64_t(i), stream);
      testing::fill_uniform(Matrix{caches[size_t(i)].v.data(), dt, rows, d_, d_}, -1.f, 1.f, 2000 + 17 * uint64_t(i), stream);
    }
    DeviceBuffer<uint16_t> q(q_elems), out(q_elems);
    testing::fill_uniform(Matrix{q.data(), dt, B * sq_ * hq_, d_, d_}, -2.f, 2.f, 3000 + uint64_t(S), stream);
    const std::vector<int32_t> lens_host(static_cast<size_t>(B), static_cast<int32_t>(S));
    DeviceBuffer<int32_t> lens(static_cast<size_t>(B));
    BENCH_CUDA(cudaMemcpy(lens.data(), lens_host.data(), lens.bytes(), cudaMemcpyHostToDevice));
    // A shuffled block table: page i of sequence b at a random index of the B · max_blocks pages
    // (--page-order sequential: at index b · max_blocks + i).
    std::vector<int32_t> table_host;
    DeviceBuffer<int32_t> table;
    if (page) {
      table_host.resize(size_t(B * max_blocks));
      std::iota(table_host.begin(), table_host.end(), 0);
      if (!sequential) std::shuffle(table_host.begin(), table_host.end(), std::mt19937_64(uint64_t(B * S + page)));
      table = DeviceBuffer<int32_t>(table_host.size());
      BENCH_CUDA(cudaMemcpy(table.data(), table_host.data(), table.bytes(), cudaMemcpyHostToDevice));
    }
    const int64_t cache_batch = page ? B * max_blocks : B, cache_rows = page ? page : S;
    auto cache_view = [&](const uint16_t* base) { return make_attn_tensor(static_cast<const void*>(base), dt, cache_batch, cache_rows, hkv, d_); };
    const AttnConstTensor qv = make_attn_tensor(static_cast<const void*>(q.data()), dt, B, sq_, hq_, d_);
    const AttnTensor ov = make_attn_tensor(static_cast<void*>(out.data()), dt, B, sq_, hq_, d_);
    const int heuristic = decode_attention_num_splits(B, hkv, sq_ * (hq_ / hkv), d_, rows_per_seq, b.device().sms, page,
                                                      detail::current_device_spec().smem_per_sm);

    for (int64_t splits : splits_) {
      DecodeAttentionParams p;
      p.causal = sq_ > 1;
      p.num_splits = int(splits);
      if (page) p.block_table = table.data(), p.max_blocks = max_blocks;
      const size_t ws_bytes = decode_attention_workspace_size(B, sq_, hq_, hkv, d_, rows_per_seq, int(splits));
      DeviceBuffer<unsigned char> ws(ws_bytes);
      auto call = [&](int i) {
        const CacheSet& c = caches[size_t(i % sets)];
        decode_attention(qv, cache_view(c.k.data()), cache_view(c.v.data()), lens.data(), ov, nullptr, p, ws.data(), ws_bytes, stream);
      };
      const int used = splits ? int(splits) : heuristic;
      const std::string splits_s = std::to_string(used) + (splits ? "" : "*");
      const std::string pt = where + " splits " + splits_s;
      // Verify first, on a poisoned output.
      testing::fill_bits(Matrix{out.data(), dt, B * sq_ * hq_, d_, d_}, testing::nan_bits(dt), stream);
      call(0);
      BENCH_CUDA(cudaStreamSynchronize(stream));
      Check check = verify_pair(dt, q, out, caches[0], 0, 0, S, hkv, page, table_host, max_blocks, p);
      check += verify_pair(dt, q, out, caches[0], B - 1, hkv - 1, S, hkv, page, table_host, max_blocks, p);
      const bool ok = b.verify(pt, check);
      const Timing t = b.time(call, Method::graph(std::max(calls_, sets)));
      const double gbs = kv_bytes / (t.median_ms * 1e-3) / 1e9;
      b.log("%s: %.2f us, %.0f GB/s (%s%% of copy)", pt.c_str(), t.us(), gbs, b.pct_of_copy(gbs).c_str());
      auto r = b.row({std::to_string(B), std::to_string(S), std::to_string(hkv), cache_s, splits_s, fmt(t.us(), 2),
                      fmt(gbs, 0), b.pct_of_copy(gbs), ok ? "ok (" + fmt(check.max_abs, 4) + ")" : "FAILED"});
      r.set("batch", B).set("seqlen", S).set("seqlen_q", sq_).set("heads_q", hq_).set("heads_kv", hkv).set("head_dim", d_);
      r.set("dtype", dtype_).set("cache", page ? "paged" : "contiguous").set("page_size", page);
      if (page) r.set("page_order", page_order_);
      r.set("num_splits", used).set("heuristic_splits", splits == 0).set("causal", p.causal);
      r.set("kv_bytes", kv_bytes).set("median_us", t.us()).set("min_us", t.min_us()).set("gbs", gbs);
      if (b.copy_gbs() > 0) r.set("fraction_of_copy", gbs / b.copy_gbs()).set("copy_gbs", b.copy_gbs());
      r.set("calls_per_graph", std::max(calls_, sets)).set("cache_rotation_sets", sets).set("reps", b.reps()).set("warmup", b.warmup());
      r.verification(ok, check).set("checked_elements", check.count);
    }
  }
};

}  // namespace

BLOCKFUSE_COMMAND(DecodeAttentionBench, "bench decode-attention",
                  "GB/s of decode attention against a KV cache (--batch, --seqlen, --hkv, --page, --splits, --json)");

}  // namespace blockfuse::bench
