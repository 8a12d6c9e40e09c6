export JOBS=16; scripts/gpu-check 2>&1 | tail -16   # session 7 run8, right after run7 on the warm machine (build reused)
