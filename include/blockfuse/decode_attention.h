// blockfuse/decode_attention.h — attention of a few query tokens against a KV cache (the decode
// step of inference, and speculative decoding's verification of up to 16 tokens), FlashDecoding
// style: the query heads of one KV head are packed into the rows of one matrix product so the
// cache is read once per KV head, the sequence is cut into splits across CTAs, and a second small
// kernel merges the splits' partial outputs by their log-sum-exps.
//
// Layouts. q and out are [B, Sq, Hq, D] (1 <= Sq <= 16). The cache is either
//   contiguous: k_cache, v_cache [B, S_max, Hkv, D] (Hugging Face's StaticCache, or a DynamicCache's
//               [B, Hkv, S, D] tensors passed with their strides), or
//   paged:      k_cache, v_cache [num_blocks, page_size, Hkv, D] (vLLM's and FlashInfer's layout) with
//               an int32 block_table [B, max_blocks]: key j of sequence b lives in page
//               block_table[b][j / page_size], row j % page_size.
// cache_seqlens (int32, device, [B]) gives each sequence's number of valid keys L_b, which may be 0.
// An optional cache_leftpad (int32, device, [B]; FlashAttention's name) starts sequence b's keys at
// slot P_b instead of 0: its keys are slots [P_b, L_b) (a left-padded batch, as Hugging Face's
// generate pads prompts, needs no copy).
// Strides are in elements and the head dim is contiguous, as in blockfuse/attention.h.
//
// Semantics: the Sq queries of sequence b are its last Sq positions (query t sits at position
// L_b − Sq + t); key j is visible to query t iff P_b <= j < L_b and, with causal / a window, the forward's
// rule with shift = L_b − Sq (blockfuse/attention.h; causal aligned bottom-right). Soft-cap, scale
// and the LSE as in the forward. A query row that sees no key gets out = 0 and lse = −inf. Cache
// slots before P_b or at or past L_b are never read, so stale or NaN values there cannot reach any
// output.
//
// The device-side values (cache_seqlens, block_table) are trusted, as cu_seqlens are in the
// forward: reading them on the host would cost a synchronisation. Host copies, when given, are
// checked before anything launches. On the device a sequence whose length is negative or leaves no
// room in the cache (length > capacity − new keys; capacity S_max, or max_blocks·page_size), or whose
// cache_leftpad lies outside [0, L_b], gets NaN
// in every output row and LSE (and its new keys are not written); a page index outside
// [0, num_blocks) among the pages a row block reads turns that block's rows NaN. Never a silent read
// out of bounds. Block-table entries past a sequence's last page are never read and may hold anything.
//
// decode_attention_with_kvcache adds the decode step's small ops, as FlashAttention's
// flash_attn_with_kvcache does: rotary embedding of the new q and k (GPT-NeoX's rotate-half pairing
// (d, d + R/2) or GPT-J's interleaved (2i, 2i + 1), over the first R = rotary_dim dims, at positions
// cache_seqlens[b] + t, from cos/sin tables [max_positions, R/2]), the new k and v written into the
// cache at positions cache_seqlens[b] .. + Sq − 1, then attention over the L_b + Sq keys. The caller
// advances cache_seqlens afterwards.
//
// Supported: bf16 / fp16, D ∈ {64, 128, 256}, Hq % Hkv == 0 (MHA, GQA, MQA), compute capability
// >= 8.0. Deterministic for a fixed number of splits (no atomics, fixed merge order).
#pragma once

#include <cstddef>
#include <cstdint>

#include "blockfuse/attention.h"
#include "blockfuse/common.h"

namespace blockfuse {

// The most query tokens per sequence the decode path takes (beyond it: the prefill kernel).
constexpr int64_t kDecodeAttentionMaxSeqlenQ = 16;
// The most splits of one sequence.
constexpr int kDecodeAttentionMaxSplits = 128;

struct DecodeAttentionParams {
  float softmax_scale = 0.0f;  // <= 0: 1/√D
  bool causal = false;         // bottom-right aligned (matters for Sq > 1)
  int64_t window_left = -1;    // as AttentionParams; -1: unbounded
  int64_t window_right = -1;
  float softcap = 0.0f;        // > 0: s = cap·tanh(s / cap)

  // Paged cache when block_table != nullptr: int32 device [B, max_blocks] with row stride
  // block_table_stride (elements, >= max_blocks); k_cache/v_cache .batch is then num_blocks and
  // .seqlen the page size.
  const int32_t* block_table = nullptr;
  int64_t max_blocks = 0;
  int64_t block_table_stride = 0;  // 0: max_blocks

  // Optional host copies of cache_seqlens [B] and block_table [B, block_table_stride], checked
  // before anything launches when given (lengths in [0, capacity − new tokens], page indices in
  // [0, num_blocks) for every page a sequence uses).
  const int32_t* host_cache_seqlens = nullptr;
  const int32_t* host_block_table = nullptr;
  // Left padding: int32 device [B], sequence b's keys start at slot cache_leftpad[b] (0 <= P_b <= L_b);
  // nullptr: 0. decode_attention only (decode_attention_with_kvcache rejects it). host_cache_leftpad:
  // an optional host copy, checked against host_cache_seqlens before anything launches.
  const int32_t* cache_leftpad = nullptr;
  const int32_t* host_cache_leftpad = nullptr;

  // Splits of the key range. 0: decode_attention_num_splits for this shape; otherwise 1..128.
  int num_splits = 0;
  // An upper bound of the keys any sequence attends to, for the split heuristic (0: the cache's
  // capacity). A larger bound only costs more splits; a smaller one is never wrong either (every
  // split covers its share of the actual length).
  int64_t max_seqlen_k = 0;
};

// The rotary embedding of decode_attention_with_kvcache. cos and sin are [max_positions, rotary_dim/2]
// tables with row stride `ld` (elements), fp32 or the dtype of q; max_positions must cover the cache's
// capacity (S_max, or max_blocks·page_size), so no position the kernel can see lies past the table.
struct RotaryParams {
  const void* cos = nullptr;  // nullptr: no rotary embedding
  const void* sin = nullptr;
  bool fp32 = false;          // the tables' dtype: fp32, or that of q
  int64_t rotary_dim = 0;     // R: even, <= D; 0: D
  int64_t max_positions = 0;  // rows of the tables
  int64_t ld = 0;             // 0: rotary_dim / 2
  bool interleaved = false;   // false: GPT-NeoX (rotate-half, Llama/Qwen/Mistral); true: GPT-J
};

// The splits decode_attention picks: a pure function of the batch, KV heads, rows per KV head
// (Sq · Hq/Hkv), head dim, the longest key range, the SM count, the cache's layout (page_size 0:
// contiguous; else the page size) and the shared memory of one SM (smem_per_sm, bytes; 0: unknown):
// 17-32 rows per KV head run as two 16-row CTAs while the K + V read (bf16 / fp16) is at most
// 32 MiB; pages below 64 keys or of no power of two aim at two CTAs per SM where two fit
// (src/attention/decode_params.h, tested on the CPU), at most 65535 / heads_kv (the grid's y
// dimension). decode_attention passes the current device's values. Throws blockfuse::Error for an
// unsupported head dim, non-positive sizes, a negative page size or smem_per_sm.
int decode_attention_num_splits(int64_t batch, int64_t heads_kv, int64_t rows_per_kv_head, int64_t head_dim,
                                int64_t seqlen_k, int sm_count, int64_t page_size = 0, int64_t smem_per_sm = 0);

// Workspace bytes one call needs: the splits' fp32 partial outputs and LSEs (num_splits > 1) and,
// for decode_attention_with_kvcache, the rotated q. num_splits as in the params (0: the heuristic's
// choice on the current device, the larger of its contiguous and paged counts); max_seqlen_k is the key range the call's split choice sees:
// params.max_seqlen_k when it is set, else the cache's capacity (S_max, or max_blocks · page_size).
// 16-byte aligned, needs no zeroing; a larger workspace is always fine.
size_t decode_attention_workspace_size(int64_t batch, int64_t seqlen_q, int64_t heads_q, int64_t heads_kv,
                                       int64_t head_dim, int64_t max_seqlen_k, int num_splits,
                                       bool with_kvcache = false);

// out = attention(q, cache). lse: nullptr or fp32 [B, Hq, Sq] contiguous. Batch 0 launches nothing. Validates every argument
// before anything is launched (blockfuse::Error naming it): dtypes, D, shapes (k_cache and v_cache
// alike, Hq % Hkv == 0, out like q, 1 <= Sq <= 16), strides as the forward's (and k/v seq_stride < 2^31), block_table and its
// sizes, cache_seqlens non-null and 4-byte aligned, window/soft-cap/scale values, num_splits, the
// workspace size, overlaps of out with the inputs, device pointers of the current device.
void decode_attention(AttnConstTensor q, AttnConstTensor k_cache, AttnConstTensor v_cache,
                      const int32_t* cache_seqlens, AttnTensor out, float* lse, const DecodeAttentionParams& params,
                      void* workspace, size_t workspace_bytes, cudaStream_t stream = nullptr);

// The decode step: rotary embedding of q and k_new (when rotary.cos is set), k_new / v_new
// [B, Sq, Hkv, D] written into the cache at cache_seqlens[b] + t, then decode_attention over the
// L_b + Sq keys. q is not modified (its rotated copy lives in the workspace).
void decode_attention_with_kvcache(AttnConstTensor q, AttnTensor k_cache, AttnTensor v_cache, AttnConstTensor k_new,
                                   AttnConstTensor v_new, const int32_t* cache_seqlens, const RotaryParams& rotary,
                                   AttnTensor out, float* lse, const DecodeAttentionParams& params, void* workspace,
                                   size_t workspace_bytes, cudaStream_t stream = nullptr);

}  // namespace blockfuse
