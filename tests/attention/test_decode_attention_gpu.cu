// decode_attention() and decode_attention_with_kvcache() on the device against the fp64 CPU
// reference (src/attention/decode_reference.h): Sq 1, 2, 5, 16; D 64 / 128 / 256; GQA ratios 1, 2,
// 4, 7 (Qwen 28/4), 8 and 32 (MQA); lengths 0, 1, 63, 64, 65, 1000, 4097 mixed in one batch;
// contiguous caches ([B, S, Hkv, D], and [B, Hkv, S, D] passed by its strides) and paged ones (pages
// 1, 8, 16, 32, 48, 64, 96, 128, 256: every KvLayout; shuffled block tables, padded table rows); num_splits 1, 3, 128 and the
// heuristic; causal with Sq > 1 (rows without keys when L < Sq), sliding windows, soft-cap, a custom
// scale; bf16 and fp16; q / k_new / v_new as views of one fused QKV buffer and a padded out.
//
// Every cache slot at or past a sequence's length, every page no sequence owns, and every block-table
// entry a sequence does not use holds NaN or an out-of-range index: none may reach an output. Outputs,
// the LSE and the workspace are poisoned before each call, which runs twice (bitwise determinism).
// with_kvcache (rotary NeoX / GPT-J, fp32 and dtype tables, rotary_dim < D) checks the output, the
// written slots, and that no other slot of either cache changed. CUDA graphs: replays after the
// lengths changed on the device, and a captured decode step replayed as a decode loop (lengths
// advanced between replays). The device guard: a length past the capacity or a page index out of
// range (past the pool, or negative) gives NaN rows (out and LSE) for that sequence only and writes none of its new keys
// (a bad page only where every row block reads it: the header promises NaN for the blocks that do).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "attention/decode_reference.h"
#include "blockfuse/decode_attention.h"
#include "common/host_float.h"
#include "testing/device_buffer.h"
#include "testing/gtest/gtest_util.h"
#include "testing/testing.h"

namespace blockfuse {
namespace {

using testing::DeviceBuffer;

// One call's shape and options, built by chained setters: Case(B, Sq, Hq, Hkv, D, lens).paged(16).
struct Case {
  int64_t b = 1, sq = 1, hq = 1, hkv = 1, d = 64;
  std::vector<int32_t> lens;
  int64_t page_size = 0;  // 0: contiguous
  int64_t table_pad = 0;  // block_table_stride = max_blocks + table_pad
  int n_splits = 0;       // 0: the heuristic
  bool is_causal = false;
  int64_t left = -1, right = -1;
  float cap = 0, scale = 0;
  DType dt = DType::kBF16;
  bool bhsd = false;     // contiguous cache stored [B, Hkv, S, D], passed by its strides
  bool fused = false;    // q (and k_new, v_new) views of one [B, Sq, (Hq + 2 Hkv) D] buffer; out padded
  bool with_lse = true;
  int64_t max_seqlen_k = 0;
  // with_kvcache
  bool append = false, rotary = true, interleaved = false, rot_fp32 = true;
  int64_t rotary_dim = 0;
  // The device guard: sequence bad_seq gets a length past the capacity (bad_page -1), a negative
  // length (-3) or an out-of-range index at block-table entry bad_page (-2: its last used page).
  int64_t bad_seq = -1, bad_page = -1;
  bool whole_table = false;  // every block-table entry valid (for lengths that grow), not only the used ones
  // Left padding per sequence (cache_leftpad); empty: none. The slots before it hold NaN and, paged,
  // the pages wholly before it out-of-range indices: neither may be read.
  std::vector<int32_t> pads;

  Case() = default;
  Case(int64_t b_, int64_t sq_, int64_t hq_, int64_t hkv_, int64_t d_, std::vector<int32_t> l)
      : b(b_), sq(sq_), hq(hq_), hkv(hkv_), d(d_), lens(std::move(l)) {}
  Case& paged(int64_t p, int64_t pad = 0) { return page_size = p, table_pad = pad, *this; }
  Case& splits(int s) { return n_splits = s, *this; }
  Case& causal() { return is_causal = true, *this; }
  Case& window(int64_t l, int64_t r = -1) { return left = l, right = r, *this; }
  Case& softcap(float c) { return cap = c, *this; }
  Case& with_scale(float s) { return scale = s, *this; }
  Case& fp16() { return dt = DType::kFP16, *this; }
  Case& heads_major() { return bhsd = true, *this; }
  Case& fused_qkv() { return fused = true, *this; }
  Case& no_lse() { return with_lse = false, *this; }
  Case& max_keys(int64_t m) { return max_seqlen_k = m, *this; }
  Case& with_kvcache(bool gptj = false, int64_t r = 0, bool fp32_tables = true) {
    return append = true, interleaved = gptj, rotary_dim = r, rot_fp32 = fp32_tables, *this;
  }
  Case& no_rotary() { return append = true, rotary = false, *this; }
  Case& guard(int64_t seq, int64_t page = -1) { return bad_seq = seq, bad_page = page, *this; }
  Case& guard_negative(int64_t seq) { return bad_seq = seq, bad_page = -3, *this; }  // length -5
  Case& guard_negative_page(int64_t seq) { return bad_seq = seq, bad_page = -4, *this; }  // last used entry -1
  Case& all_pages() { return whole_table = true, *this; }
  Case& leftpad(std::vector<int32_t> p) { return pads = std::move(p), *this; }
};

std::string case_name(const Case& c) {
  std::string n = "B" + std::to_string(c.b) + "_Sq" + std::to_string(c.sq) + "_Hq" + std::to_string(c.hq) + "_Hkv" +
                  std::to_string(c.hkv) + "_D" + std::to_string(c.d);
  n += c.page_size ? "_page" + std::to_string(c.page_size) : std::string(c.bhsd ? "_bhsd" : "_contig");
  if (c.table_pad) n += "_pad" + std::to_string(c.table_pad);
  n += c.n_splits ? "_splits" + std::to_string(c.n_splits) : "_auto";
  if (c.is_causal) n += "_causal";
  if (c.left >= 0) n += "_left" + std::to_string(c.left);
  if (c.right >= 0) n += "_right" + std::to_string(c.right);
  if (c.cap > 0) n += "_cap" + std::to_string(int(c.cap));
  if (c.scale > 0) n += "_scale";
  if (c.fused) n += "_fused";
  if (!c.with_lse) n += "_nolse";
  if (c.max_seqlen_k) n += "_maxk" + std::to_string(c.max_seqlen_k);
  if (c.append)
    n += !c.rotary ? "_append" : std::string(c.interleaved ? "_gptj" : "_neox") + (c.rot_fp32 ? "_f32" : "_dt") +
                                     (c.rotary_dim ? "_R" + std::to_string(c.rotary_dim) : "");
  if (c.bad_seq >= 0) n += c.bad_page == -1 ? "_badlen" : c.bad_page == -3 ? "_neglen" : c.bad_page == -4 ? "_negpage" : "_badpage";
  if (!c.pads.empty()) n += "_leftpad";
  return n + "_" + dtype_name(c.dt);
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

// Complete on return (to_device, testing/device_buffer.h, says why): the graph tests launch on a
// non-blocking stream right after make_problem.
template <class T>
DeviceBuffer<T> upload(const std::vector<T>& h) {
  DeviceBuffer<T> d(h.size());
  if (!h.empty() && (cudaMemcpy(d.data(), h.data(), d.bytes(), cudaMemcpyHostToDevice) != cudaSuccess ||
                     cudaStreamSynchronize(cudaStreamLegacy) != cudaSuccess))
    throw Error("cudaMemcpy to the device failed");
  return d;
}
template <class T>
std::vector<T> download(const DeviceBuffer<T>& d) {
  std::vector<T> h(d.size());
  testing::to_host(d, h.data());
  return h;
}

// Host state and device copies of one case.
struct Problem {
  Case c;
  int64_t capacity = 0, max_blocks = 0, num_blocks = 0, rows = 0, table_stride = 0, R = 0, max_pos = 0;
  int64_t cbs = 0, css = 0, chs = 0;        // cache strides (block/batch, row, head)
  int64_t qrow = 0, q_off = 0, kn_off = 0, vn_off = 0;  // the q buffer's row (Sq step) and view offsets
  int64_t orow = 0;                         // out's seq stride
  std::vector<uint16_t> hq, hk, hv, hnew;   // hq: q (and k_new, v_new when fused); hnew: k_new | v_new
  std::vector<int32_t> lens, table, pads;
  std::vector<float> cos32, sin32;
  std::vector<uint16_t> cos16, sin16;
  DeviceBuffer<uint16_t> q, k, v, knew, out;
  DeviceBuffer<float> lse, dcos32, dsin32;
  DeviceBuffer<uint16_t> dcos16, dsin16;
  DeviceBuffer<int32_t> dlens, dtable, dpads;
  DeviceBuffer<unsigned char> ws;
  size_t ws_bytes = 0;
  DecodeAttentionParams p;
  RotaryParams rot;

  int64_t new_tokens() const { return c.append ? c.sq : 0; }
  // Element offset of (key j, kv head h) of sequence b in either cache (host table).
  int64_t slot(int64_t b, int64_t j, int64_t h) const {
    int64_t blk = b, row = j;
    if (c.page_size) blk = table[size_t(b * table_stride + j / c.page_size)], row = j % c.page_size;
    return blk * cbs + row * css + h * chs;
  }
  AttnConstTensor cache_view(const void* base) const {
    return AttnConstTensor{base, c.dt, num_blocks, rows, c.hkv, c.d, cbs, css, chs};
  }
  AttnTensor cache_view(void* base) const { return AttnTensor{base, c.dt, num_blocks, rows, c.hkv, c.d, cbs, css, chs}; }
  AttnConstTensor q_view(const uint16_t* base) const {
    return AttnConstTensor{base + q_off, c.dt, c.b, c.sq, c.hq, c.d, c.sq * qrow, qrow, c.d};
  }
  AttnConstTensor new_view(const uint16_t* fused_base, const uint16_t* base, bool is_v) const {
    if (c.fused) return AttnConstTensor{fused_base + (is_v ? vn_off : kn_off), c.dt, c.b, c.sq, c.hkv, c.d, c.sq * qrow, qrow, c.d};
    const int64_t n = c.b * c.sq * c.hkv * c.d;
    return make_attn_tensor(static_cast<const void*>(base + (is_v ? n : 0)), c.dt, c.b, c.sq, c.hkv, c.d);
  }
  AttnTensor out_view() const { return AttnTensor{out.data(), c.dt, c.b, c.sq, c.hq, c.d, c.sq * orow, orow, c.d}; }
};

uint16_t bits_of(DType dt, float x) { return host::from_float(dt, x); }

void make_problem(Problem& pr, const Case& c, uint64_t seed) {
  pr.c = c;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u2(-2.f, 2.f), u1(-1.f, 1.f);
  const uint16_t nan = testing::nan_bits(c.dt);
  pr.lens = c.lens;
  int64_t need = 1;
  for (int32_t l : c.lens) need = std::max<int64_t>(need, l + pr.new_tokens());
  // Contiguous: room past the longest sequence (NaN-filled); paged: whole pages, three pages spare.
  if (c.page_size) {
    pr.max_blocks = (need + c.page_size - 1) / c.page_size + 1;
    pr.capacity = pr.max_blocks * c.page_size;
    pr.num_blocks = c.b * pr.max_blocks + 3;
    pr.rows = c.page_size;
    pr.table_stride = pr.max_blocks + c.table_pad;
    std::vector<int32_t> perm(static_cast<size_t>(pr.num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    pr.table.assign(size_t(c.b * pr.table_stride), 0);
    for (int64_t b = 0; b < c.b; ++b) {
      const int64_t used =
          c.whole_table ? pr.max_blocks : (c.lens[size_t(b)] + pr.new_tokens() + c.page_size - 1) / c.page_size;
      // Entries past the used pages, and of pages wholly before the left padding: out of range, never read.
      const int64_t first = c.pads.empty() ? 0 : std::max<int64_t>(c.pads[size_t(b)], 0) / c.page_size;
      for (int64_t i = 0; i < pr.table_stride; ++i)
        pr.table[size_t(b * pr.table_stride + i)] = i >= first && i < used ? perm[size_t(b * pr.max_blocks + i)]
                                                                            : int32_t(i % 2 ? -1 - i : pr.num_blocks + i);
    }
  } else {
    pr.capacity = need + 5;
    pr.num_blocks = c.b;
    pr.rows = pr.capacity;
  }
  if (c.bhsd)
    pr.cbs = c.hkv * pr.rows * c.d, pr.css = c.d, pr.chs = pr.rows * c.d;
  else
    pr.cbs = pr.rows * c.hkv * c.d, pr.css = c.hkv * c.d, pr.chs = c.d;
  const size_t cache_elems = size_t(pr.num_blocks * pr.cbs);
  pr.hk.assign(cache_elems, nan);
  pr.hv.assign(cache_elems, nan);
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t j = c.pads.empty() ? 0 : std::max<int64_t>(c.pads[size_t(b)], 0); j < c.lens[size_t(b)]; ++j)
      for (int64_t h = 0; h < c.hkv; ++h)
        for (int64_t d = 0; d < c.d; ++d) {
          pr.hk[size_t(pr.slot(b, j, h) + d)] = bits_of(c.dt, u2(rng));
          pr.hv[size_t(pr.slot(b, j, h) + d)] = bits_of(c.dt, u1(rng));
        }
  // q (and k_new / v_new when fused): rows of (Hq [+ 2 Hkv]) heads.
  pr.qrow = (c.fused ? c.hq + 2 * c.hkv : c.hq) * c.d;
  pr.q_off = 0, pr.kn_off = c.hq * c.d, pr.vn_off = (c.hq + c.hkv) * c.d;
  pr.hq.resize(size_t(c.b * c.sq * pr.qrow));
  for (int64_t i = 0; i < int64_t(pr.hq.size()); ++i)
    pr.hq[size_t(i)] = bits_of(c.dt, (i % pr.qrow) >= pr.vn_off && c.fused ? u1(rng) : u2(rng));
  const int64_t n_new = c.b * c.sq * c.hkv * c.d;
  pr.hnew.resize(size_t(2 * n_new));
  for (int64_t i = 0; i < 2 * n_new; ++i) pr.hnew[size_t(i)] = bits_of(c.dt, i < n_new ? u2(rng) : u1(rng));
  // Rotary tables (Llama's frequencies) for every position the cache can hold.
  pr.R = c.rotary_dim ? c.rotary_dim : c.d;
  pr.max_pos = pr.capacity;
  for (int64_t pos = 0; c.append && pos < pr.max_pos; ++pos)
    for (int64_t i = 0; i < pr.R / 2; ++i) {
      const double th = double(pos) * std::pow(10000.0, -2.0 * double(i) / double(pr.R));
      pr.cos32.push_back(float(std::cos(th))), pr.sin32.push_back(float(std::sin(th)));
      pr.cos16.push_back(bits_of(c.dt, float(std::cos(th)))), pr.sin16.push_back(bits_of(c.dt, float(std::sin(th))));
    }
  // The device guard's corruption, in the host copies too (the reference reads them).
  if (c.bad_seq >= 0) {
    if (c.bad_page == -1) {
      pr.lens[size_t(c.bad_seq)] = int32_t(pr.capacity - pr.new_tokens() + 1);
    } else if (c.bad_page == -3) {
      pr.lens[size_t(c.bad_seq)] = -5;
    } else {
      const int64_t used = (c.lens[size_t(c.bad_seq)] + pr.new_tokens() + c.page_size - 1) / c.page_size;
      const int64_t at = c.bad_page <= -2 ? used - 1 : c.bad_page;
      pr.table[size_t(c.bad_seq * pr.table_stride + at)] = c.bad_page == -4 ? -1 : int32_t(pr.num_blocks + 7);
    }
  }

  pr.q = upload(pr.hq), pr.k = upload(pr.hk), pr.v = upload(pr.hv), pr.knew = upload(pr.hnew);
  pr.orow = c.fused ? c.hq * c.d + 64 : c.hq * c.d;  // fused: a padded out, the padding must stay poisoned
  pr.out = DeviceBuffer<uint16_t>(size_t(c.b * c.sq * pr.orow));
  pr.lse = DeviceBuffer<float>(size_t(c.b * c.hq * c.sq));
  pr.dlens = upload(pr.lens);
  pr.pads = c.pads;
  if (!c.pads.empty()) pr.dpads = upload(pr.pads), pr.p.cache_leftpad = pr.dpads.data();
  if (c.page_size) pr.dtable = upload(pr.table);
  pr.dcos32 = upload(pr.cos32), pr.dsin32 = upload(pr.sin32), pr.dcos16 = upload(pr.cos16), pr.dsin16 = upload(pr.sin16);

  pr.p.causal = c.is_causal, pr.p.window_left = c.left, pr.p.window_right = c.right;
  pr.p.softcap = c.cap, pr.p.softmax_scale = c.scale, pr.p.num_splits = c.n_splits, pr.p.max_seqlen_k = c.max_seqlen_k;
  if (c.page_size) {
    pr.p.block_table = pr.dtable.data();
    pr.p.max_blocks = pr.max_blocks;
    pr.p.block_table_stride = c.table_pad ? pr.table_stride : 0;
  }
  if (c.append && c.rotary) {
    pr.rot.cos = c.rot_fp32 ? static_cast<const void*>(pr.dcos32.data()) : pr.dcos16.data();
    pr.rot.sin = c.rot_fp32 ? static_cast<const void*>(pr.dsin32.data()) : pr.dsin16.data();
    pr.rot.fp32 = c.rot_fp32, pr.rot.rotary_dim = c.rotary_dim, pr.rot.max_positions = pr.max_pos;
    pr.rot.interleaved = c.interleaved;
  }
  // Exactly the size asked for (the key range the call's split choice sees: max_seqlen_k or the capacity).
  pr.ws_bytes = decode_attention_workspace_size(c.b, c.sq, c.hq, c.hkv, c.d, c.max_seqlen_k ? c.max_seqlen_k : pr.capacity,
                                                c.n_splits, c.append);
  pr.ws = DeviceBuffer<unsigned char>(pr.ws_bytes);
}

// Output, LSE and workspace poisoned (NaN bit patterns).
void poison(Problem& pr) {
  testing::fill_bits(Matrix{pr.out.data(), pr.c.dt, pr.c.b * pr.c.sq, pr.orow, pr.orow}, testing::nan_bits(pr.c.dt));
  BF_CUDA_OK(cudaMemset(pr.lse.data(), 0xff, pr.lse.bytes()));
  if (pr.ws_bytes) BF_CUDA_OK(cudaMemset(pr.ws.data(), 0xff, pr.ws_bytes));
}

void launch(Problem& pr, cudaStream_t stream = nullptr) {
  const Case& c = pr.c;
  float* lse = c.with_lse ? pr.lse.data() : nullptr;
  if (c.append) {
    decode_attention_with_kvcache(pr.q_view(pr.q.data()), pr.cache_view(static_cast<void*>(pr.k.data())),
                                  pr.cache_view(static_cast<void*>(pr.v.data())), pr.new_view(pr.q.data(), pr.knew.data(), false),
                                  pr.new_view(pr.q.data(), pr.knew.data(), true), pr.dlens.data(), pr.rot, pr.out_view(), lse,
                                  pr.p, pr.ws.data(), pr.ws_bytes, stream);
  } else {
    decode_attention(pr.q_view(pr.q.data()), pr.cache_view(static_cast<const void*>(pr.k.data())),
                     pr.cache_view(static_cast<const void*>(pr.v.data())), pr.dlens.data(), pr.out_view(), lse, pr.p,
                     pr.ws.data(), pr.ws_bytes, stream);
  }
}

// The reference of the current host state; with append, also the caches it leaves (ek, ev).
void reference(const Problem& pr, std::vector<double>& out, std::vector<double>& lse, std::vector<uint16_t>& ek,
               std::vector<uint16_t>& ev) {
  const Case& c = pr.c;
  DecodeAttentionParams p = pr.p;
  p.block_table = nullptr;  // the reference reads the host table
  const int32_t* table = c.page_size ? pr.table.data() : nullptr;
  ek = pr.hk, ev = pr.hv;
  if (!c.append) {
    const attn::DecodeReferenceInput in{pr.q_view(pr.hq.data()), pr.cache_view(static_cast<const void*>(ek.data())),
                                        pr.cache_view(static_cast<const void*>(ev.data())), pr.lens.data(), table,
                                        pr.pads.empty() ? nullptr : pr.pads.data()};
    attn::decode_attention_reference(in, p, out, lse);
    return;
  }
  RotaryParams r = pr.rot;
  r.cos = c.rot_fp32 ? static_cast<const void*>(pr.cos32.data()) : pr.cos16.data();
  r.sin = c.rot_fp32 ? static_cast<const void*>(pr.sin32.data()) : pr.sin16.data();
  if (!c.rotary) r.cos = r.sin = nullptr;
  attn::decode_attention_with_kvcache_reference(pr.q_view(pr.hq.data()), pr.cache_view(static_cast<void*>(ek.data())),
                                                pr.cache_view(static_cast<void*>(ev.data())),
                                                pr.new_view(pr.hq.data(), pr.hnew.data(), false),
                                                pr.new_view(pr.hq.data(), pr.hnew.data(), true), pr.lens.data(), table, r, p,
                                                out, lse);
}

// Compares out and LSE with the reference (NaN rows expected where the reference has them) and,
// with append, both caches: every slot as the reference leaves it, bit for bit, except that the
// rotated dims of a written key may differ by one rounding (fp32 vs fp64 rotation). Returns the
// number of failures.
int64_t check(const Problem& pr, const std::vector<double>& ro, const std::vector<double>& rl,
              const std::vector<uint16_t>& ek, const std::vector<uint16_t>& ev) {
  const Case& c = pr.c;
  const auto o = download(pr.out);
  const auto l = download(pr.lse);
  // As the forward: P rounded to the input type before P·V and O once at the end (|v| <= 1).
  const testing::Tolerance tol = testing::tolerance(c.dt, 2, 2 * testing::unit_roundoff(c.dt) + 1e-4);
  testing::CompareStats so, sl;
  int64_t pad_touched = 0;
  for (int64_t r = 0; r < c.b * c.sq; ++r) {
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t d = 0; d < c.d; ++d)
        so.add(r * c.hq + h, d, host::to_float(c.dt, o[size_t(r * pr.orow + h * c.d + d)]),
               ro[size_t((r * c.hq + h) * c.d + d)], tol);
    for (int64_t i = c.hq * c.d; i < pr.orow; ++i) pad_touched += o[size_t(r * pr.orow + i)] != testing::nan_bits(c.dt);
  }
  EXPECT_EQ(pad_touched, 0) << "out's row padding was written";
  // LSE [B, Hq, Sq]: fp32 exp2 / log; -inf for rows without keys, NaN for guarded sequences.
  if (c.with_lse) {
    for (int64_t i = 0; i < c.b * c.hq * c.sq; ++i) sl.add(i / c.sq, i % c.sq, l[size_t(i)], rl[size_t(i)], testing::Tolerance{2e-3, 2e-4});
    testing::expect_close(sl, case_name(c) + ": lse (b·Hq + head, t)");
  }
  testing::expect_close(so, case_name(c) + ": out (row·Hq + head, d)");
  int64_t cache_bad = 0;
  if (c.append) {
    const auto k = download(pr.k), v = download(pr.v);
    const double u = testing::unit_roundoff(c.dt);
    for (size_t i = 0; i < k.size(); ++i) {
      if (v[i] != ev[i]) ++cache_bad;
      if (k[i] == ek[i]) continue;
      const double a = host::to_float(c.dt, k[i]), e = host::to_float(c.dt, ek[i]);
      const bool written = ek[i] != pr.hk[i];  // a slot the append wrote (the rounding may differ there)
      if (!(written && std::fabs(a - e) <= 2 * u * std::fabs(e) + 1e-6)) ++cache_bad;
    }
    EXPECT_EQ(cache_bad, 0) << "cache elements differing from the reference append (every other slot must be unchanged)";
  }
  return so.violations + so.nonfinite + sl.violations + sl.nonfinite + pad_touched + cache_bad;
}

void run_case(const Case& c) {
  BF_SKIP_WITHOUT_GPU("decode_attention");
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed) + " " + case_name(c));
  Problem pr;
  make_problem(pr, c, seed);
  std::vector<double> ro, rl;
  std::vector<uint16_t> ek, ev;
  reference(pr, ro, rl, ek, ev);
  std::vector<uint16_t> first_out;
  std::vector<float> first_lse;
  // Twice on the same inputs (with append the second call rewrites the same slots with the same
  // values): the same bits.
  for (int run = 0; run < 2; ++run) {
    poison(pr);
    launch(pr);
    BF_CUDA_OK(cudaDeviceSynchronize());
    if (run == 0) {
      EXPECT_EQ(check(pr, ro, rl, ek, ev), 0);
      first_out = download(pr.out), first_lse = download(pr.lse);
    } else {
      EXPECT_TRUE(download(pr.out) == first_out) << "out differs between two runs";
      if (c.with_lse) EXPECT_EQ(std::memcmp(download(pr.lse).data(), first_lse.data(), first_lse.size() * 4), 0) << "lse differs";
    }
  }
}

class DecodeAttentionGpu : public ::testing::TestWithParam<Case> {};
TEST_P(DecodeAttentionGpu, MatchesReference) { run_case(GetParam()); }

const std::vector<int32_t> kMixed = {0, 1, 63, 64, 65, 1000, 4097};

// Shapes, lengths, caches and splits.
INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeAttentionGpu,
    ::testing::Values(
        Case(7, 1, 32, 8, 128, kMixed),  // Llama GQA 4, the heuristic
        Case(7, 1, 32, 8, 128, kMixed).splits(1), Case(7, 1, 32, 8, 128, kMixed).splits(3),
        Case(7, 1, 32, 8, 128, kMixed).splits(128),  // more splits than a short sequence has tiles
        Case(7, 1, 32, 8, 128, kMixed).paged(16), Case(7, 1, 32, 8, 128, kMixed).paged(64, 3).splits(3),
        Case(7, 1, 32, 8, 128, kMixed).paged(48).splits(5),  // a page size that is no power of two
        Case(4, 1, 32, 8, 128, {65, 1, 4097, 1000}).paged(256).splits(128),
        // Each of the split kernel's paged layouts (KvLayout): pages of 1, 8 and 32 keys (a shift and
        // a mask per key; at D 64 a pass's 16 keys span two pages of 8), of 128 keys (a tile per
        // page), of 96 (no power of two, a division per key, more than a tile).
        Case(3, 1, 16, 4, 64, {37, 1, 300}).paged(1).splits(3), Case(3, 1, 16, 4, 64, {37, 1, 300}).paged(8),
        Case(3, 1, 16, 4, 64, {129, 0, 1000}).paged(128).splits(3), Case(2, 1, 8, 4, 256, {70, 300}).paged(8),
        Case(3, 1, 32, 8, 128, {33, 200, 1000}).paged(32), Case(3, 1, 32, 8, 128, {95, 97, 1000}).paged(96).splits(3),
        Case(3, 1, 32, 32, 128, {65, 1000, 4097}).fp16(),                // MHA
        Case(3, 2, 16, 8, 64, {0, 64, 1000}).paged(16).splits(3),        // GQA 2, D 64
        Case(2, 1, 28, 4, 128, {1000, 4097}).paged(64),                  // Qwen 28/4 (GQA 7)
        Case(2, 5, 28, 4, 128, {63, 1000}).causal().fp16(),              // GQA 7, Sq 5: 35 rows
        Case(3, 1, 64, 8, 128, {1, 65, 1000}).splits(3),                 // GQA 8
        Case(3, 1, 32, 1, 128, {1, 63, 4097}).paged(16),                 // MQA 32
        Case(2, 2, 32, 1, 64, {1000, 3}).splits(128).fp16(),             // MQA, 64 rows per KV head
        Case(2, 1, 8, 4, 256, {4097, 65}).paged(64).splits(3),           // D 256
        Case(2, 16, 16, 2, 256, {17, 1000}).causal(),                    // D 256, 128 rows per KV head
        Case(3, 1, 32, 8, 128, {0, 0, 0}), Case(3, 1, 32, 8, 128, {0, 0, 0}).paged(16).splits(3),  // nothing to read
        Case(2, 1, 32, 8, 128, {4097, 64}).heads_major().splits(3),      // [B, Hkv, S, D] by strides
        Case(2, 1, 32, 8, 128, {1000, 70}).fused_qkv().no_lse(),
        Case(2, 1, 32, 8, 128, {4097, 300}).max_keys(512),               // a smaller bound is never wrong
        Case(2, 1, 32, 8, 128, {4097, 300}).with_scale(0.05f).splits(7)),
    [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

// Speculative decoding: Sq 2 / 5 / 16 with causal (rows without keys when L < Sq), windows, soft-cap.
INSTANTIATE_TEST_SUITE_P(
    Masks, DecodeAttentionGpu,
    ::testing::Values(Case(4, 16, 32, 8, 128, {0, 5, 16, 1000}).causal(),  // L < Sq: the first rows see nothing
                      Case(4, 16, 32, 8, 128, {0, 5, 16, 1000}).causal().paged(16).splits(3),
                      Case(3, 2, 32, 8, 128, {1, 2, 4097}).causal().splits(128),
                      Case(3, 5, 8, 2, 64, {4, 65, 1000}).causal().window(100).paged(48).fp16(),
                      Case(2, 5, 8, 8, 128, {65, 1000}).window(3, 1),  // a window either side, not causal
                      Case(2, 1, 32, 8, 128, {1000, 4097}).window(256).splits(3),  // sliding window decode
                      Case(2, 4, 16, 8, 256, {1000, 63}).causal().softcap(50.f).paged(16),  // Gemma-2
                      Case(2, 1, 32, 8, 128, {1000, 4097}).softcap(30.f).splits(128),
                      Case(2, 5, 32, 1, 128, {300, 1000}).causal().window(0).softcap(20.f)),  // only the diagonal
    [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

// decode_attention_with_kvcache: rotary NeoX / GPT-J, fp32 / dtype tables, rotary_dim < D, no rotary;
// paged (the new keys may open a new page) and contiguous.
INSTANTIATE_TEST_SUITE_P(
    WithKvcache, DecodeAttentionGpu,
    ::testing::Values(Case(3, 1, 32, 8, 128, {0, 63, 1000}).with_kvcache(),
                      Case(3, 1, 32, 8, 128, {0, 63, 1000}).with_kvcache().paged(16).splits(3),
                      Case(3, 1, 32, 8, 128, {15, 64, 4096}).with_kvcache(true).paged(64),  // 15 + 1 fills page 0
                      Case(2, 4, 32, 8, 128, {12, 1000}).with_kvcache(false, 64).causal().paged(16),
                      Case(2, 3, 32, 8, 128, {10, 700}).with_kvcache(true, 64, false).causal().splits(4),
                      Case(2, 16, 32, 1, 128, {0, 33}).with_kvcache(false, 0, false).causal(),
                      Case(2, 2, 8, 8, 64, {0, 33}).with_kvcache(false, 32, false).causal().paged(48).fp16(),
                      Case(2, 5, 16, 2, 256, {100, 2000}).with_kvcache(true, 128).causal().fp16(),
                      Case(2, 2, 28, 4, 128, {70, 500}).with_kvcache().fused_qkv().causal(),
                      Case(2, 1, 32, 8, 128, {5, 300}).no_rotary().paged(16).splits(128)),
    [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

// The device guard: one sequence with a length past the capacity or an out-of-range page it uses
// gets NaN rows (out and LSE); the others are exact; with append its new keys are not written.
INSTANTIATE_TEST_SUITE_P(
    Guard, DecodeAttentionGpu,
    ::testing::Values(Case(3, 1, 32, 8, 128, {100, 500, 900}).guard(1),
                      Case(3, 1, 32, 8, 128, {100, 500, 900}).paged(16).splits(3).guard(1),
                      Case(3, 1, 32, 8, 128, {100, 500, 900}).paged(16).guard(1, 2),
                      Case(3, 1, 32, 8, 128, {100, 500, 900}).paged(16).splits(1).guard(2, 0),
                      Case(3, 1, 32, 8, 128, {100, 500, 900}).paged(16).guard_negative(2),
                      Case(3, 2, 32, 8, 128, {100, 500, 900}).with_kvcache().guard_negative(0),
                      Case(3, 2, 32, 8, 128, {100, 500, 900}).paged(64).with_kvcache().guard(0),
                      Case(3, 2, 32, 8, 128, {100, 500, 900}).paged(64).with_kvcache().guard(1, -2),
                      // A negative index (the unsigned compare), and a bad page on a tile-per-page cache.
                      Case(3, 1, 32, 8, 128, {100, 500, 900}).paged(16).guard_negative_page(1),
                      Case(3, 1, 32, 8, 128, {100, 500, 900}).paged(128).splits(3).guard_negative_page(2),
                      Case(3, 1, 32, 8, 128, {100, 500, 900}).paged(256).guard(1, -2)),
    [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

// Left padding (cache_leftpad): keys before P_b are neither visible nor read (NaN there and, paged,
// out-of-range indices for the pages wholly before it); P_b = L_b leaves no key; a query before P_b
// sees none; P_b outside [0, L_b] is guarded (NaN rows).
INSTANTIATE_TEST_SUITE_P(
    LeftPad, DecodeAttentionGpu,
    ::testing::Values(Case(4, 1, 32, 8, 128, {4097, 1000, 65, 7}).leftpad({0, 999, 3, 7}),
                      Case(4, 1, 32, 8, 128, {4097, 1000, 65, 7}).leftpad({130, 37, 64, 5}).paged(16).splits(3),
                      Case(3, 4, 28, 4, 128, {1000, 63, 9}).leftpad({17, 60, 0}).causal().window(100),
                      Case(2, 1, 32, 1, 64, {3000, 50}).leftpad({2049, 1}).paged(64).fp16(),
                      // A tile per page with the padding inside a page and off the tile grid.
                      Case(3, 1, 32, 8, 128, {4097, 1000, 700}).leftpad({300, 37, 699}).paged(256).splits(3),
                      Case(2, 1, 32, 8, 128, {4097, 300}).leftpad({1000, 0}).splits(128),
                      Case(3, 1, 32, 8, 128, {100, 500, 900}).leftpad({0, 501, 0}),
                      Case(3, 1, 32, 8, 128, {100, 500, 900}).leftpad({-1, 0, 0}).paged(16)),
    [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

// A captured call replayed after new lengths were written on the device: the replay reads them.
TEST(DecodeAttentionGpuGraph, ReplayReadsNewLengths) {
  BF_SKIP_WITHOUT_GPU("decode_attention");
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  // Every slot up to 4000 holds a key, so any shorter length reads real keys.
  Problem full;
  make_problem(full, Case(3, 1, 32, 8, 128, {4000, 4000, 4000}).paged(16), seed);
  cudaStream_t s;
  BF_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  launch(full, s);  // eager first
  BF_CUDA_OK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  BF_CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  launch(full, s);
  BF_CUDA_OK(cudaStreamEndCapture(s, &g));
  BF_CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  for (const std::vector<int32_t>& lens : {std::vector<int32_t>{7, 1999, 64}, std::vector<int32_t>{0, 1, 4000}}) {
    full.lens = lens;
    BF_CUDA_OK(cudaMemcpy(full.dlens.data(), lens.data(), 12, cudaMemcpyHostToDevice));
    poison(full);
    BF_CUDA_OK(cudaDeviceSynchronize());  // the poison (default stream) before the replay (stream s)
    BF_CUDA_OK(cudaGraphLaunch(ge, s));
    BF_CUDA_OK(cudaStreamSynchronize(s));
    std::vector<double> ro, rl;
    std::vector<uint16_t> ek, ev;
    reference(full, ro, rl, ek, ev);
    EXPECT_EQ(check(full, ro, rl, ek, ev), 0) << "lengths " << lens[0] << ", " << lens[1] << ", " << lens[2];
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

// A captured decode step (rotary + append + attention) replayed as a decode loop: the lengths are
// advanced on the device between replays, each replay appends at the new position and attends over
// everything appended so far.
TEST(DecodeAttentionGpuGraph, DecodeLoopWithKvcache) {
  BF_SKIP_WITHOUT_GPU("decode_attention_with_kvcache");
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  Problem pr;
  make_problem(pr, Case(3, 2, 32, 8, 128, {14, 300, 1000}).with_kvcache().causal().paged(16).splits(3).all_pages(), seed);
  cudaStream_t s;
  BF_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  launch(pr, s);  // eager first (it writes the slots the first replay rewrites, with the same values)
  BF_CUDA_OK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  BF_CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  launch(pr, s);
  BF_CUDA_OK(cudaStreamEndCapture(s, &g));
  BF_CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  for (int step = 0; step < 3; ++step) {
    poison(pr);
    BF_CUDA_OK(cudaDeviceSynchronize());  // the poison (default stream) before the replay (stream s)
    BF_CUDA_OK(cudaGraphLaunch(ge, s));
    BF_CUDA_OK(cudaStreamSynchronize(s));
    std::vector<double> ro, rl;
    std::vector<uint16_t> ek, ev;
    reference(pr, ro, rl, ek, ev);
    EXPECT_EQ(check(pr, ro, rl, ek, ev), 0) << "step " << step;
    // The next step: the caches as the device left them, lengths advanced by Sq on the device.
    pr.hk = download(pr.k), pr.hv = download(pr.v);
    for (auto& l : pr.lens) l += int32_t(pr.c.sq);
    BF_CUDA_OK(cudaMemcpy(pr.dlens.data(), pr.lens.data(), pr.dlens.bytes(), cudaMemcpyHostToDevice));
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

// The compute-sanitizer set (scripts/sanitize runs '*Sanitizer*'): tails, pages, splits, the guard.
class DecodeAttentionSanitizer : public ::testing::TestWithParam<Case> {};
TEST_P(DecodeAttentionSanitizer, Small) { run_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Shapes, DecodeAttentionSanitizer,
                         ::testing::Values(Case(3, 1, 8, 2, 128, {0, 65, 130}).paged(48).splits(3),
                                           Case(2, 5, 8, 1, 64, {3, 100}).causal().with_kvcache(true, 32).paged(16),
                                           Case(2, 2, 4, 2, 256, {70, 1}).window(20).splits(2).guard(0),
                                           Case(2, 2, 8, 2, 128, {70, 130}).leftpad({5, 64}).paged(16).causal(),
                                           Case(2, 1, 8, 2, 128, {130, 300}).leftpad({70, 0}).paged(128).splits(2),
                                           Case(2, 1, 8, 2, 64, {9, 40}).paged(1).guard_negative_page(1)),
                         [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

}  // namespace
}  // namespace blockfuse
