#!/usr/bin/env bash
# Session 8 (H100): bench/memory_bound_baselines.py with the warm machine's build-gpu/_C.so (a gpu-check
# just before), after `cp .deps/peers/part1/cu13.tar.xz.00 /tmp/` (the call before this one, carrying
# .deps/peers/part1); this call carries .deps/peers/part2 (../shared/peers/install 2, inline: ../shared
# is not copied to the device). blockfuse (PDL on and off), torch.compile with static shapes, Liger and
# quack in one process: every output kind of both ops.
set -uo pipefail
O=${OUT:-/tmp/baselines}; mkdir -p "$O"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
sp=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
( cat /tmp/cu13.tar.xz.00 .deps/peers/part2/cu13.tar.xz.01 | tar -xJ -C "$sp" && python3 -m pip install -q --no-deps .deps/peers/part2/*.whl && python3 -c "import quack.rmsnorm, liger_kernel; print('peers installed')" ) > "$O/install.log" 2>&1; el "install rc $?"; tail -1 "$O/install.log"
SO=$(find build-gpu -maxdepth 2 -name '_C.so' | head -1); echo "library: $SO"
export BLOCKFUSE_TORCH_LIB="$PWD/$SO" PYTHONPATH="$PWD/python"
B="python3 bench/memory_bound_baselines.py"
timeout 150 $B --ops add-rmsnorm --outs bf16 --json "$O/add_rmsnorm_bf16.json" > "$O/add_rmsnorm_bf16.log" 2>&1; el "add-rmsnorm bf16 rc $?"
timeout 150 $B --ops add-rmsnorm --outs fp8s,fp8d --impls blockfuse,compile --json "$O/add_rmsnorm_fp8.json" > "$O/add_rmsnorm_fp8.log" 2>&1; el "add-rmsnorm fp8 rc $?"
timeout 120 $B --ops swiglu --u 14336,16384,28672 --outs bf16 --json "$O/swiglu_bf16.json" > "$O/swiglu_bf16.log" 2>&1; el "swiglu bf16 rc $?"
timeout 150 $B --ops swiglu --u 14336,16384,28672 --outs fp8s,fp8d --impls blockfuse,compile --json "$O/swiglu_fp8.json" > "$O/swiglu_fp8.log" 2>&1; el "swiglu fp8 rc $?"
python3 "$(dirname "$0")/baselines_table.py" "$O"
