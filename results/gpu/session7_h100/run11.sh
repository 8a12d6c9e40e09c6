export JOBS=16; scripts/gpu-check 2>&1 | tail -16   # session 7 run11: the final tree
