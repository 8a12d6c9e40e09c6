// The binding's device workspaces (workspace.h).
#include "workspace.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "blockfuse/decode_gemm.h"

namespace blockfuse_torch {

namespace {

struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
  std::vector<void*> retired;  // replaced buffers: earlier graphs may still use them
};

std::mutex g_mutex;
std::map<std::tuple<int, int, int64_t>, Workspace> g_ws;  // (device, kind, key)

std::string num(size_t v) { return std::to_string(v); }

}  // namespace

void* device_workspace(WorkspaceKind kind, int device, size_t need, cudaStream_t stream, size_t* bytes,
                       const char* fn, const char* reserve_hint, int64_t key) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Workspace& ws = g_ws[{device, static_cast<int>(kind), key}];
  if (need > ws.bytes) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &status);
    TORCH_CHECK_VALUE(status == cudaStreamCaptureStatusNone, "blockfuse.", fn, ": the call needs a workspace of ",
                      num(need), " bytes on cuda:", std::to_string(device), ", more than the ", num(ws.bytes),
                      " reserved, and the stream is being captured (a capture cannot allocate it); required: one "
                      "eager call with this shape, or ", reserve_hint, ", before the capture");
    const size_t grow = std::max<size_t>(need, std::max<size_t>(2 * ws.bytes, size_t(1) << 20));
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, grow);
    TORCH_CHECK(err == cudaSuccess, "blockfuse.", fn, ": cudaMalloc of the workspace (", num(grow),
                " bytes) failed: ", cudaGetErrorString(err));
    err = cudaMemsetAsync(p, 0, grow, stream);  // ordered before the kernel on the same stream
    TORCH_CHECK(err == cudaSuccess, "blockfuse.", fn, ": zeroing the workspace failed: ", cudaGetErrorString(err));
    if (ws.ptr) ws.retired.push_back(ws.ptr);
    ws.ptr = p;
    ws.bytes = grow;
  }
  *bytes = ws.bytes;
  return ws.ptr;
}

void* reserved_workspace(WorkspaceKind kind, int device, size_t* bytes, int64_t key) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto it = g_ws.find({device, static_cast<int>(kind), key});
  *bytes = it == g_ws.end() ? 0 : it->second.bytes;
  return it == g_ws.end() ? nullptr : it->second.ptr;
}

size_t decode_workspace_need(int64_t m, int64_t n, int64_t k, int device) {
  if (m < 1 || m > blockfuse::kDecodeGemmMaxM || n < 1 || k < 0 || k % 8 != 0) return 0;
  const int sms = at::cuda::getDeviceProperties(device)->multiProcessorCount;
  return blockfuse::decode_gemm_workspace_size(m, n, k, blockfuse::decode_gemm_heuristic(m, n, k, sms));
}

}  // namespace blockfuse_torch
