// blockfuse/gated_up.h — the fused gated up-projection: h = act(x·W_gateᵀ) ⊙ (x·W_upᵀ).
//
// One kernel computes the GEMM x[M, K] · w[2U, K]ᵀ and applies the gate on the fp32 accumulators,
// so only h[M, U] is written: the [M, 2U] intermediate of the unfused pipeline never exists.
//
// Weight layout (see weight_layout.h): w is the *interleaved* [2U, K] matrix whose
//   row 2j   is row j of W_up   (even rows = up)
//   row 2j+1 is row j of W_gate (odd rows  = gate)
// i.e. the rows of two nn.Linear weights ([out_features, in_features], K contiguous) interleaved.
// Then column pair (2j, 2j+1) of x·wᵀ is (up_j, gate_j), and h[:, j] = act(gate_j) · up_j.
//
// Numerics: bf16/fp16 inputs, fp32 accumulation, the activation and the product in fp32 on the
// accumulators, one rounding to the output dtype.
#pragma once

#include "blockfuse/common.h"

namespace blockfuse {

// Which kernel implementation runs. kAuto picks the decode kernel for M <= 32 rows; above, the
// sm90a kernel on compute capability 9.0 when the build has it (gated_up_has_sm90()), the sm80
// kernel everywhere else.
enum class GatedUpKernel : int {
  kAuto = 0,
  kSm80 = 1,  // CuTe mma.sync m16n8k16 + cp.async multistage; compute capability >= 8.0
  kSm90 = 2,  // wgmma + TMA, warp-specialised, persistent (CUTLASS collectives + blockfuse's gated
              // epilogue); compute capability 9.0 only (sm_90a code). Built by default when 90 is in
              // BLOCKFUSE_CUDA_ARCHS (CMake BLOCKFUSE_SM90=AUTO; ON/OFF force it).
  kDecode = 3,  // M <= 32 only: decode_gemm's kernel (decode_gemm.h; mma.sync with the tokens on the
                // n = 8 side, W streamed once, split-K through a workspace) with the gate applied to
                // its fp32 sums; compute capability >= 8.0. At decode sizes a GEMM tiled for large M
                // leaves most SMs idle: Llama-3 8B, M = 1, the sm90a kernel took 111 µs where cuBLAS's
                // GEMV + SiLU·mul took 101 (../shared/BENCHMARKING.md).
};
// Whether this build contains the sm90a kernel.
bool gated_up_has_sm90();
const char* kernel_name(GatedUpKernel k);

// Optional overrides, for tests and benchmarks. Defaults choose everything automatically.
// The order in which the sm90a kernel's persistent scheduler walks the output tiles (CUTLASS's
// rasterisation: along one grid side, in swizzled groups of up to 8 tiles across the other). kAuto
// takes the tile row's order (src/gated_up/tile_configs_sm90.h: row 1 along N, the other rows
// CUTLASS's choice, along M when there are more N tiles than M tiles); the other two force one, a
// tuning knob beside tile_config (docs/gated_up.md#tuning, "The raster of row 1"). Only the sm90a
// kernels take it: anything but kAuto on a call that runs another kernel throws.
enum class Sm90Raster : int {
  kAuto = 0,
  kAlongM = 1,
  kAlongN = 2,
};

struct GatedUpOptions {
  GatedUpKernel kernel = GatedUpKernel::kAuto;
  int tile_config = -1;  // index into the chosen kernel's tile table (sm80: gated_up_tile_config();
                         // sm90: kSm90TileConfigs); -1 = heuristic (the only value kDecode takes)
  Sm90Raster sm90_raster = Sm90Raster::kAuto;  // the sm90a tile order (above); kAuto elsewhere
};

// h = act(x · w_gateᵀ) ⊙ (x · w_upᵀ), with w interleaved as described above.
//   x   [M, K]   bf16 or fp16, row stride x.ld
//   w   [2U, K]  same dtype, row stride w.ld
//   out [M, U]   same dtype, row stride out.ld
// Requirements (checked; a violation throws blockfuse::Error naming the argument):
//   all on the current CUDA device, compute capability >= 8.0; dtypes equal;
//   K % 8 == 0 and U % 8 == 0, ld % 8 == 0 and every data pointer 16-byte aligned (the kernel
//   moves 16-byte vectors); out must not overlap x or w. M may be any value >= 0 (M == 0 is a
//   no-op); kDecode requires M <= 32. The call is asynchronous on `stream`.
// Without a workspace the decode kernel (M <= 32) does not split K: it streams W at full rate when
// N = 2U gives every SM about three 64-column blocks (2U >= ~25k on 132 SMs: Llama-3 8B and larger)
// and from fewer warps below that. The overload with a workspace lets it split K.
void gated_up(ConstMatrix x, ConstMatrix w, Matrix out, Activation act,
              cudaStream_t stream = nullptr, const GatedUpOptions& options = {});

// The same with a workspace for the decode kernel's split-K, under decode_gemm.h's rules: allocate
// gated_up_workspace_size bytes once (16-byte aligned), zero it once, reuse it on one stream (the
// kernel leaves it zeroed, so calls can be captured in CUDA graphs); it may be shared with
// decode_gemm. The split is decode_gemm_heuristic(M, 2U, K, SMs)'s; the workspace must hold what
// that split needs (checked: gated_up_workspace_size). Null = no split.
// Above 32 rows on the sm90a kernel the workspace buys the stream-K tile row: where the
// heuristic's with-workspace table picks it (the H100 points where it beat the other rows by >= 2 %,
// src/gated_up/tile_table_sm90.inc; docs/gated_up.md#tuning) and the workspace holds what it needs
// after the decode region (gated_up_workspace_size with the options) and is 16-byte aligned, that
// row runs; otherwise,
// silently, the row chosen without a workspace (a workspace too small is never an error unless
// options.tile_config forces the stream-K row). The decode region's zeroed counters are kept; the
// stream-K region needs no zeroing by the caller (the kernel initialises it on `stream` per call).
void gated_up(ConstMatrix x, ConstMatrix w, Matrix out, Activation act, void* workspace, size_t workspace_bytes,
              cudaStream_t stream = nullptr, const GatedUpOptions& options = {});

// Workspace bytes that suffice for every gated_up call with x.rows <= m, x.cols == k, out.cols == u
// on `device` (-1: the current device); 0 when none of them splits K. Requires m >= 0, k >= 0,
// u >= 0, k % 8 == 0 (throws blockfuse::Error naming the argument otherwise).
size_t gated_up_workspace_size(int64_t m, int64_t k, int64_t u, int device = -1);

// The same for calls made with `options`: also covers the sm90 stream-K tile row (row 3 of
// src/gated_up/tile_configs_sm90.h), forced through options.tile_config, or — options.tile_config
// = -1, options.kernel kAuto or kSm90, m > 32, `device` of compute capability 9.0, a build with the
// sm90a kernels — where the heuristic with a workspace picks it at x.rows == m. Its partial-tile
// accumulators and flags sit after the decode kernel's region, which therefore stays zeroed, and the
// kernel initialises them itself on the call's stream. For the heuristic the stream-K part is sized
// at m: a call with fewer rows whose stream-K row needs more runs the row chosen without a
// workspace instead. Throws as above, and for a forced sm90 tile config where the library has no
// sm90a kernels.
size_t gated_up_workspace_size(int64_t m, int64_t k, int64_t u, int device, const GatedUpOptions& options);

// The tile configurations the sm80 kernel is compiled for (GatedUpOptions::tile_config indexes
// them; the heuristic that picks one is internal: src/gated_up/heuristic_sm80.cpp).
struct GatedUpTileConfig {
  int block_m;   // rows of x per CTA
  int block_n;   // interleaved columns per CTA (block_n / 2 outputs)
  int block_k;
  int stages;    // cp.async pipeline depth
  int warps_m;   // warp grid
  int warps_n;
  int smem_bytes() const;  // dynamic shared memory the kernel needs
  int threads() const { return 32 * warps_m * warps_n; }
};
int gated_up_num_tile_configs();
GatedUpTileConfig gated_up_tile_config(int index);

// The gated MLP's backward through the down projection, fused (training; sm90a). With the forward
// y = h · w_downᵀ, h = act(gate) ⊙ up and z = x · wᵀ (w interleaved as above, so column 2j of z is
// up_j and column 2j + 1 is gate_j), it computes dh = dy · w_down in fp32 and, in the GEMM's
// epilogue, without storing dh:
//   dz[:, 2j]     = dh[:, j] · act(gate_j)                   (the gradient of z, interleaved like z)
//   dz[:, 2j + 1] = dh[:, j] · up_j · act'(gate_j)
//   h[:, j]       = act(gate_j) · up_j                       (the forward's h, for dw_down = dyᵀ · h)
// fp32 math on the accumulators, one rounding (the unfused path rounds dh to the dtype first).
//   dy     [M, N]   bf16 or fp16
//   w_down [N, U]   same dtype: nn.Linear's [out_features = N, in_features = U] weight
//   z      [M, 2U]  same dtype
//   dz     [M, 2U]  same dtype; may be z exactly (in place), must not otherwise overlap an input
//   h      [M, U]   same dtype, or absent (Matrix{}: a null pointer and no rows) when not needed
// Requirements (checked; a violation throws blockfuse::Error naming the argument, nothing launched):
// N % 8 == 0, U % 8 == 0, every ld % 8 == 0, 16-byte-aligned pointers; outputs do not overlap the
// inputs or each other; the current device has compute capability 9.0 and the build the sm90a
// kernels (gated_mlp_dgated_available). M == 0 is a no-op. Asynchronous on `stream`.
void gated_mlp_dgated(ConstMatrix dy, ConstMatrix w_down, ConstMatrix z, Matrix dz, Matrix h, Activation act,
                      cudaStream_t stream = nullptr);
// Whether gated_mlp_dgated runs on `device` (-1: the current one): a build with the sm90a kernels
// and a device of compute capability 9.0.
bool gated_mlp_dgated_available(int device = -1);

}  // namespace blockfuse
