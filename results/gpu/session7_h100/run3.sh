#!/usr/bin/env bash
# session 7 run3 (H100, warm machine right after run2 = results/gpu/session6_h100/decode_x_late.sh on
# branch decode-x-late, whose gpu-check passed but ran past 600 s before its benches): the decode
# benches with run2's build-gpu.
ls build-gpu/bench/blockfuse || cmake --build build-gpu -j16 --target blockfuse_bench >/dev/null 2>&1; O=$OUT; timeout 60 build-gpu/bench/blockfuse bench decode-gemm --m 1,8,16,17,24,32 --json $O/bench_decode_gemm.json > $O/bench_decode_gemm.log 2>&1; echo rc $?; timeout 60 build-gpu/bench/blockfuse bench gated-up --models 8b,70b --tokens 1,16,17,24,32 --json $O/bench_gated_up.json > $O/bench_gated_up.log 2>&1; echo rc $?; cp results/gpu/latest.json $O/ 2>/dev/null; grep -vE "^\[|verif" $O/bench_decode_gemm.log | tail -32 | cut -c1-150; grep -vE "^\[|verif" $O/bench_gated_up.log | tail -12 | cut -c1-200
