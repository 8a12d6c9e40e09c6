export JOBS=16; scripts/gpu-check 2>&1 | tail -16   # session 7 run16: the final tree (run15 was a by-hand copy of run12)
