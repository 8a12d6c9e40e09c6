// Internal: CPU references of decode_attention and decode_attention_with_kvcache (fp64
// accumulation) for the tests, written from the semantics of include/blockfuse/decode_attention.h.
// They are themselves checked against the forward's reference (attention/reference.h) in
// tests/attention/test_decode_attention_reference.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "blockfuse/decode_attention.h"

namespace blockfuse::attn {

// Host views of a decode call. Every pointer is a host pointer; strides as the device call's.
// The cache is paged when host_block_table is set ([B, block_table_stride] int32, as
// DecodeAttentionParams::host_block_table; max_blocks and block_table_stride are read from the
// params), contiguous otherwise. cache_seqlens: [B] host int32; cache_leftpad: [B] host int32 or
// nullptr (decode_attention's left padding: sequence b's keys are slots [P_b, L_b)).
struct DecodeReferenceInput {
  AttnConstTensor q, k_cache, v_cache;
  const int32_t* cache_seqlens = nullptr;
  const int32_t* host_block_table = nullptr;
  const int32_t* cache_leftpad = nullptr;
};

// Is sequence b guarded on the device? Its length (plus new_tokens) is negative or past the capacity,
// its left padding outside [0, L], or a page it uses ([P / page, ceil((L + new) / page))) is outside
// [0, num_blocks). The kernel poisons all of
// a length-guarded sequence's rows, but for a bad page only the row blocks that read it: callers
// that plant a bad page choose one every row block reads (the reference then matches the kernel).
bool decode_reference_guarded(const DecodeReferenceInput& in, const DecodeAttentionParams& p, int64_t b,
                              int64_t new_tokens = 0);

// out [B, Sq, Hq, D] and lse [B, Hq, Sq] of decode_attention: query t of sequence b sits at
// position L_b − Sq + t and sees key j iff P_b <= j < L_b and the forward's causal / window rule with
// shift = L_b − Sq; soft-cap and scale as the forward. Scores, exponentials and sums in double.
// A row without a visible key: out 0, lse −inf. A guarded sequence (above): every out and lse NaN.
// Only the slots below a sequence's length are read, so NaN elsewhere cannot reach the result.
void decode_attention_reference(const DecodeReferenceInput& in, const DecodeAttentionParams& p,
                                std::vector<double>& out, std::vector<double>& lse);

// Host rotary tables of decode_attention_with_kvcache: cos / sin [max_positions, ld] of fp32 or
// the dtype of q (RotaryParams's conventions, host pointers).
using RotaryReference = RotaryParams;

// The element the kernels store for x rotated at `pos` (rounded to dtype): NeoX pairs (d, d + R/2),
// GPT-J pairs (2i, 2i + 1) over the first R dims; dims >= R unchanged. x holds D values.
void rotary_reference(const RotaryReference& r, DType dtype, int64_t head_dim, int64_t pos, const double* x,
                      double* y);

// decode_attention_with_kvcache on host copies: q and k_new rotated at positions L_b + t (when
// r.cos is set), rounded to the dtype, k_new / v_new written into k_cache / v_cache (host copies,
// modified in place; no write for a guarded sequence) at L_b + t, then decode_attention_reference
// over L_b + Sq keys with the rotated q.
void decode_attention_with_kvcache_reference(const AttnConstTensor& q, const AttnTensor& k_cache,
                                             const AttnTensor& v_cache, const AttnConstTensor& k_new,
                                             const AttnConstTensor& v_new, const int32_t* cache_seqlens,
                                             const int32_t* host_block_table, const RotaryReference& r,
                                             const DecodeAttentionParams& p, std::vector<double>& out,
                                             std::vector<double>& lse);

}  // namespace blockfuse::attn
