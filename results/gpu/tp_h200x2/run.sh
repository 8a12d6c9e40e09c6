#!/usr/bin/env bash
# The two-GPU tensor-parallel test (python/tests/test_tp_gpu.py) on an nvidia-h200-x2 machine: builds
# the torch binding (sm_90, without the sm90a GEMM kernels to keep the build short: gated_up runs its
# sm80 kernel, which is what is being checked for correctness here) and runs the test, which starts
# tp_worker.py under torchrun --nproc-per-node 2 (NCCL) for a tiny Llama and Gemma-2.
# Device tool: run(kind="nvidia-h200-x2", command="OUT=$OUT results/gpu/tp_h200x2/run.sh", timeout_s=300,
#   carry=[the .deps include folders of scripts/gpu-check's header])
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/tp_out}
mkdir -p "$O"
nvidia-smi -L | tee "$O/gpus.txt"
cmake -S . -B build-tp -G Ninja -DCMAKE_BUILD_TYPE=Release -DBLOCKFUSE_CUDA_ARCHS=90 -DBLOCKFUSE_SM90=OFF \
  -DBLOCKFUSE_BUILD_PYTHON=ON > "$O/build.log" 2>&1 && timeout 200 cmake --build build-tp -j32 --target blockfuse_C >> "$O/build.log" 2>&1
echo "build rc $?"
SO=$(find build-tp -maxdepth 2 -name _C.so | head -1)
BLOCKFUSE_TORCH_LIB=$PWD/$SO PYTHONPATH=$PWD/python timeout 240 python3 -m pytest python/tests/test_tp_gpu.py -s -q \
  > "$O/pytest_tp.log" 2>&1
echo "pytest rc $?"
grep -E "^\[rank|passed|failed|skipped" "$O/pytest_tp.log" | tail -12
