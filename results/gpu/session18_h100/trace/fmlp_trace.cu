// Session 18 diagnostic (not part of the library): where a fused-MLP call's time goes, per CTA.
// Built against a libblockfuse whose fused_mlp.cu was compiled with -DBF_FMLP_TRACE (the patch
// trace.patch beside this file): each CTA stamps %globaltimer at its entry (e0), once its list
// entries are read (e1), after phase 1 (e2), after h (e3), the last warp's last flush before the
// count-in (e4) and the last warp's end (e5). Llama-3 8B / 70B shapes at M = 1, L2 flushed before
// each traced call; prints, per row, the kernel's event time and each stamp's min / median / max
// over the active CTAs, in µs from the earliest entry.
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "blockfuse/fused_mlp.h"

void fmlp_trace_copy(unsigned long long* host, bool clear);

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e_), __LINE__); return 1; } } while (0)

int main() {
  using namespace blockfuse;
  struct Shape { const char* name; int64_t k, u; };
  const Shape shapes[] = {{"llama3-8b", 4096, 14336}, {"llama3-70b", 8192, 28672}};
  const int sparsities[] = {0, 50, 75, 90, 95, 99};
  void* flush = nullptr;
  const size_t flush_bytes = size_t(256) << 20;
  CK(cudaMalloc(&flush, flush_bytes));
  std::vector<unsigned long long> tr(4096 * 8);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  printf("%-10s %4s %5s %7s %6s | %-22s %-22s %-22s %-22s %-22s %-22s\n", "shape", "sp%", "CTAs", "kern us", "cs/ng",
         "e0 entry", "e1 list read", "e2 phase 1", "e3 h", "e4 last flush", "e5 end");
  for (const Shape& sh : shapes) {
    const int64_t m = 1, k = sh.k, u = sh.u;
    void *x, *wgu, *wd, *y, *ws;
    int32_t *idx, *cnt;
    CK(cudaMalloc(&x, m * k * 2));
    CK(cudaMalloc(&wgu, 2 * u * k * 2));
    CK(cudaMalloc(&wd, u * k * 2));
    CK(cudaMalloc(&y, m * k * 2));
    CK(cudaMemset(x, 0x11, m * k * 2));
    CK(cudaMemset(wgu, 0x11, 2 * u * k * 2));
    CK(cudaMemset(wd, 0x11, u * k * 2));
    const int64_t nb = u / 32;
    CK(cudaMalloc(&idx, nb * 4));
    CK(cudaMalloc(&cnt, 4));
    const size_t wsb = fused_mlp_workspace_size(m, k, u / 16);
    CK(cudaMalloc(&ws, wsb));
    CK(cudaMemset(ws, 0, wsb));
    for (int sp : sparsities) {
      std::vector<int32_t> all(nb);
      for (int64_t i = 0; i < nb; ++i) all[i] = int32_t(i);
      std::mt19937 rng(1234 + sp);
      std::shuffle(all.begin(), all.end(), rng);
      const int64_t keep = std::max<int64_t>(1, int64_t(nb * (100 - sp) / 100.0 + 0.5));
      std::vector<int32_t> list(all.begin(), all.begin() + keep);
      std::sort(list.begin(), list.end());
      const int32_t c = int32_t(keep);
      CK(cudaMemcpy(idx, list.data(), keep * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(cnt, &c, 4, cudaMemcpyHostToDevice));
      const ConstMatrix X = make_matrix(x, DType::kBF16, m, k), WGU = make_matrix(wgu, DType::kBF16, 2 * u, k),
                        WD = make_matrix(wd, DType::kBF16, u, k);
      const Matrix Y = make_matrix(y, DType::kBF16, m, k);
      NeuronBlockList L;
      L.indices = idx;
      L.count = cnt;
      L.capacity = nb;
      L.block_size = 32;
      auto call = [&] {
        if (sp == 0)
          fused_mlp(X, WGU, WD, Y, Activation::kSiLU, ws, wsb);
        else
          fused_mlp_sparse(X, WGU, WD, Y, Activation::kSiLU, L, ws, wsb);
      };
      for (int w = 0; w < 3; ++w) call();
      CK(cudaDeviceSynchronize());
      for (int rep = 0; rep < 3; ++rep) {
        CK(cudaMemset(flush, rep + 1, flush_bytes));  // L2 holds none of the weights
        fmlp_trace_copy(nullptr, true);
        CK(cudaDeviceSynchronize());
        CK(cudaEventRecord(e0));
        call();
        CK(cudaEventRecord(e1));
        CK(cudaDeviceSynchronize());
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        fmlp_trace_copy(tr.data(), false);
        unsigned long long t0 = ~0ull;
        std::vector<int> act;
        int cs = 0, ng = 0;
        for (int b = 0; b < 4096; ++b)
          if (tr[b * 8 + 0]) {
            t0 = std::min(t0, tr[b * 8 + 0]);
            if ((tr[b * 8 + 6] >> 32) & 0xff) {
              act.push_back(b);
              cs = int((tr[b * 8 + 6] >> 40) & 0xff);
              ng = int((tr[b * 8 + 6] >> 48) & 0xff);
            }
          }
        printf("%-10s %4d %5zu %7.2f %3d/%-2d |", sh.name, sp, act.size(), ms * 1e3, cs, ng);
        for (int e = 0; e < 6; ++e) {
          std::vector<double> v;
          for (int b : act)
            if (tr[b * 8 + e]) v.push_back((tr[b * 8 + e] - t0) / 1e3);
          std::sort(v.begin(), v.end());
          if (v.empty())
            printf(" %-22s", "-");
          else
            printf(" %6.2f %6.2f %6.2f   ", v.front(), v[v.size() / 2], v.back());
        }
        printf("\n");
      }
    }
    cudaFree(x); cudaFree(wgu); cudaFree(wd); cudaFree(y); cudaFree(ws); cudaFree(idx); cudaFree(cnt);
  }
  return 0;
}
