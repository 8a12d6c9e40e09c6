// blockfuse/attention.h — fused scaled-dot-product attention, forward pass (prefill and chunked
// prefill), FlashAttention-2 style: softmax(q·kᵀ·scale [+ mask, soft-cap])·v without materialising
// the score matrix, fp32 online softmax, optional fp32 log-sum-exp output.
//
// Layouts. q is [B, Sq, Hq, D], k and v are [B, Sk, Hkv, D], out is [B, Sq, Hq, D]; the head dim D
// is contiguous and the other three dimensions have element strides, so q, k and v may be views of
// one fused QKV projection ([B, S, (Hq + 2·Hkv)·D]). Packed variable-length batches ("varlen", the
// layout of serving engines) pass [total, H, D] tensors (batch = 1, seqlen = total tokens) plus the
// int32 prefix sums cu_seqlens_q / cu_seqlens_k ([num_seqs + 1], on the device) and the maximum
// per-sequence lengths; sequence b owns rows [cu_seqlens[b], cu_seqlens[b+1]); empty sequences are
// allowed.
//
// Semantics, for query row i of a sequence with Sq queries and Sk keys (shift = Sk − Sq):
//   s_ij  = scale · q_i·k_j                      (scale defaults to 1/√D)
//   s_ij  = cap · tanh(s_ij / cap)               (only when softcap > 0: Gemma-2's logit soft-cap)
//   key j is visible iff 0 <= j < Sk, j <= i + shift + right and j >= i + shift − left, where
//   causal means right = 0 (the diagonal aligned bottom-right, FlashAttention's convention: the
//   last query sees every key), window_right = −1 / window_left = −1 mean unbounded;
//   out_i = Σ_j softmax_j(s_ij) · v_j over the visible keys;  lse_i = log Σ_j exp(s_ij) (natural log).
// A row that sees no key (possible with causal and Sq > Sk, or a window) gets out_i = 0 and
// lse_i = −inf. A NaN in q row i stays in row i (out_i and lse_i NaN); NaN in k or v spreads to
// every row that sees it, as in the mathematics.
//
// Supported: bf16 and fp16 (q, k, v, out of one dtype), D ∈ {64, 128, 256}, Hq % Hkv == 0
// (MHA, GQA, MQA), any lengths >= 1 (0 launches nothing), lengths < 2^30. Deterministic: the same
// inputs give the same bits (no atomics, fixed reduction order). Needs compute capability >= 8.0.
// Two kernels: sm80 (mma.sync, every shape) and, in builds with it, sm90a (wgmma + TMA, warp-
// specialised; Hopper, D = 64 / 128, batched), which params.kernel = kAuto picks where it runs.
#pragma once

#include <cstdint>

#include "blockfuse/common.h"

namespace blockfuse {

// A read-only [batch, seqlen, heads, head_dim] view of device memory. Strides are in elements;
// head_dim is contiguous (stride 1). For varlen, batch = 1 and seqlen = total tokens.
struct AttnConstTensor {
  const void* data = nullptr;
  DType dtype = DType::kBF16;
  int64_t batch = 0, seqlen = 0, heads = 0, head_dim = 0;
  int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;
};

// A writable view of the same shape conventions.
struct AttnTensor {
  void* data = nullptr;
  DType dtype = DType::kBF16;
  int64_t batch = 0, seqlen = 0, heads = 0, head_dim = 0;
  int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;
  operator AttnConstTensor() const {
    return AttnConstTensor{data, dtype, batch, seqlen, heads, head_dim, batch_stride, seq_stride, head_stride};
  }
};

// A contiguous [batch, seqlen, heads, head_dim] tensor.
inline AttnConstTensor make_attn_tensor(const void* data, DType dtype, int64_t batch, int64_t seqlen,
                                        int64_t heads, int64_t head_dim) {
  return AttnConstTensor{data, dtype, batch, seqlen, heads, head_dim,
                         seqlen * heads * head_dim, heads * head_dim, head_dim};
}
inline AttnTensor make_attn_tensor(void* data, DType dtype, int64_t batch, int64_t seqlen, int64_t heads,
                                   int64_t head_dim) {
  return AttnTensor{data, dtype, batch, seqlen, heads, head_dim,
                    seqlen * heads * head_dim, heads * head_dim, head_dim};
}

// The element type of cu_seqlens buffers (only kInt32 is accepted; the field exists so a binding
// can pass what it was given and get the library's error).
enum class IndexType : int { kInt32 = 0, kInt64 = 1 };

// AttentionParams::sm90_schedule.
enum class Sm90Schedule : int { kAuto = 0, kPerTile = 1, kDynamic = 2 };

// Which forward kernel runs.
enum class AttentionKernel : int {
  kAuto = 0,  // the sm90a kernel where it runs (a build with it, compute capability 9.0), else the
              // sm80 kernel
  kSm80 = 1,  // CuTe mma.sync m16n8k16 + cp.async; compute capability >= 8.0
  kSm90 = 2,  // wgmma + TMA, warp-specialised; compute capability 9.0 only (sm_90a code), built when
              // the library was (CMake BLOCKFUSE_SM90). Every shape: head_dim 64, 128, 256, batched or
              // varlen, any mask, window and soft-cap; a varlen call whose k has no rows at all runs
              // the sm80 kernel (no TMA view describes an empty tensor).
};
// Whether this build contains the sm90a attention kernel.
bool attention_has_sm90();
const char* kernel_name(AttentionKernel k);

struct AttentionParams {
  float softmax_scale = 0.0f;  // <= 0: 1/√D
  bool causal = false;         // right = 0, aligned bottom-right
  int64_t window_left = -1;    // keys to the left of the diagonal a query sees; -1: unbounded
  int64_t window_right = -1;   // keys to the right; -1: unbounded (0 with causal)
  float softcap = 0.0f;        // > 0: s = cap·tanh(s / cap); 0: off

  // Varlen (packed) mode when cu_seqlens_q != nullptr. Both device buffers hold num_seqs + 1
  // non-decreasing offsets starting at 0. The device values are trusted (reading them would cost a
  // synchronisation): the kernel reads sequence b's rows [cu[b], cu[b+1]) and assumes
  // cu[num_seqs] <= total rows and every length <= max_seqlen. When host copies are given they are
  // checked (first 0, non-decreasing, last <= total, lengths <= max_seqlen) before anything launches.
  const void* cu_seqlens_q = nullptr;
  const void* cu_seqlens_k = nullptr;
  IndexType cu_seqlens_type = IndexType::kInt32;
  int64_t num_seqs = 0;
  int64_t max_seqlen_q = 0;
  int64_t max_seqlen_k = 0;
  const int32_t* host_cu_seqlens_q = nullptr;  // optional host copies, validated when given
  const int32_t* host_cu_seqlens_k = nullptr;

  AttentionKernel kernel = AttentionKernel::kAuto;
  // The sm90a forward kernel's query rows per tile: 0 = the heuristic's (attn::sm90_block_m), 128
  // (two consumer warpgroups), or 192 at head_dim 64 (three). For tuning and benchmarks; the sm80
  // kernel and the backward ignore it. Anything else is an error.
  int sm90_block_m = 0;
  // Optional: two int32 in device memory, zero before the first call that gets them. With them the
  // sm90a forward may run a causal or windowed shape on a persistent grid whose CTAs take their next
  // tile, longest first, from this counter, instead of the hardware's one CTA per tile (sm90_schedule
  // says when), and the last CTA sets both back to zero, so the same pair serves the next call on the
  // stream. Calls that may run at the same time (other streams, a graph replayed beside eager calls)
  // need pairs of their own. Ignored by the sm80 kernel, the backward and shapes without a band.
  // 4-byte aligned.
  int32_t* sm90_tile_counter = nullptr;
  // How the sm90a forward walks a banded shape's tiles. kAuto: from sm90_tile_counter where that
  // measured faster (attn::sm90_dynamic_walk: up to 4096 query rows), one CTA per
  // tile otherwise or without a counter; kPerTile: one CTA per tile; kDynamic: from the counter,
  // which must be given. For tuning and benchmarks; shapes without a band always run persistent.
  Sm90Schedule sm90_schedule = Sm90Schedule::kAuto;

  // attention_backward only. true: dQ in a kernel of its own, the same bits on every call. false:
  // dQ accumulated with fp32 atomics inside the dK/dV kernel (FlashAttention-2's: five S²·D products
  // instead of seven), dq's low bits depending on the atomics' order; dk and dv stay deterministic.
  // On Hopper (an sm90a build, compute capability 9.0) kAuto and kSm90 run the sm90a dK/dV kernel
  // (wgmma, TMA: FlashAttention-3's design) in both modes: each 64-row block of dQ added into an
  // fp32 accumulator by one bulk reduction (cp.reduce.async.bulk), in the deterministic mode one key
  // block after another (the same bits every call). Its dk, dv bits differ from the sm80 kernel's.
  // The workspace grows by an fp32 buffer of (rows + 64) · Hq · D (attention_backward_workspace_size).
  bool deterministic = true;
};

// Tile configuration of the sm80 kernel (see src/attention/heuristic.cpp).
struct AttentionConfig {
  int block_m = 128;  // query rows per block
  int block_n = 64;   // keys per main-loop step
  int warps = 4;      // 16·warps query rows per MMA step
};

// The configuration attention() picks for head_dim on a device of compute capability
// cc_major.cc_minor (a pure function). Throws blockfuse::Error for an unsupported head_dim.
AttentionConfig attention_heuristic(int64_t head_dim, bool causal, int cc_major, int cc_minor);
// Every configuration compiled for head_dim (the heuristic's choice first); for benchmarks/tuning.
int attention_num_configs(int64_t head_dim);
AttentionConfig attention_config(int64_t head_dim, int index);

// out = attention(q, k, v). lse: nullptr, or a 4-byte aligned fp32 device buffer of [B, Hq, Sq]
// (batched) or [Hq, total_q] (varlen), contiguous. Every argument is validated before anything is
// launched (blockfuse::Error naming the argument): dtypes equal, D supported and equal everywhere,
// head_dim stride 1, data 16-byte aligned and batch/seq/head strides multiples of 8 elements (16-byte
// vector loads), shapes consistent (k, v [B, Sk, Hkv, D]; out like q), Hq % Hkv == 0, positive
// strides, out not overlapping q, k, v or lse, device pointers of the current device, window
// arguments >= -1 and window_right <= 0 with causal, varlen arguments as documented above.
void attention(AttnConstTensor q, AttnConstTensor k, AttnConstTensor v, AttnTensor out, float* lse,
               const AttentionParams& params, cudaStream_t stream = nullptr);

// The same with an explicit configuration (one of attention_config(D, i)) of the sm80 kernel
// (params.kernel must be kAuto or kSm80).
void attention(AttnConstTensor q, AttnConstTensor k, AttnConstTensor v, AttnTensor out, float* lse,
               const AttentionParams& params, AttentionConfig config, cudaStream_t stream = nullptr);

// ---- backward ------------------------------------------------------------------------------------
//
// The gradients of out = attention(q, k, v) (same params) given dout: dq, dk, dv, from q, k, v, the
// forward's out and its fp32 lse (required: the backward recomputes the probabilities from it).
// FlashAttention-2's algorithm on mma.sync (compute capability >= 8.0; on Hopper the sm90a dK/dV
// kernel takes the dk, dv and dQ products, params.deterministic above):
// a Dsum = rowsum(dout ∘ out) pass, a kernel that walks the query blocks for each 64-key block
// (dk, dv; GQA's sum over the query heads of a group inside it) and one that walks the key blocks for
// each 64-row query block (dq). No atomics: deterministic, the same inputs give the same bits.
// Supported: head_dim 64 and 128 (256: blockfuse::Error naming head_dim), bf16 / fp16, batched and
// varlen, causal / window / soft-cap as the forward. Within the sequences, keys no query sees get
// dk = dv = 0 and rows without a visible key get dq = 0. Rows outside every varlen sequence
// (cu_seqlens[N] < total) are not written, nor are dk and dv when there is no query row at all
// (nothing is launched): the torch ops return zeros there.

// Workspace bytes of attention_backward for q (batched [B, Sq, Hq, D] or varlen [total, Hq, D]):
// the fp32 Dsum, laid out like lse, and with deterministic = false (params.deterministic) the fp32 dQ
// accumulator of (rows + 64) · Hq · D after it (none without rows); deterministic on a device that
// runs the sm90a kernel (the current one), the accumulator and an int32 [rows, Hq] counter after it
// too. 16-byte aligned, no zeroing needed (the call zeroes what it
// accumulates into).
size_t attention_backward_workspace_size(AttnConstTensor q, bool deterministic = true);

// dq like q, dk like k, dv like v (any strides of the forward's rules), out and dout like q's shape.
// Validates everything attention() does, plus: dout, dq, dk, dv of q's dtype and matching shapes,
// lse non-null (null only for a call without query rows, whose lse is empty), head_dim 64 or 128,
// params.kernel kAuto or kSm80 (kSm90: on compute capability 9.0 in an sm90a build), the workspace, and that no output overlaps an input or another output.
void attention_backward(AttnConstTensor q, AttnConstTensor k, AttnConstTensor v, AttnConstTensor out,
                        AttnConstTensor dout, const float* lse, AttnTensor dq, AttnTensor dk, AttnTensor dv,
                        const AttentionParams& params, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream = nullptr);

}  // namespace blockfuse
