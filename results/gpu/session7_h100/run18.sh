# session 7 run18 (H100, right after run16's gpu-check on the warm machine, and run17 = run5's
# `cp .deps/peers/part1/cu13.tar.xz.00 /tmp/`): run6.sh again on the final tree (carry .deps/peers/part2)
bash results/gpu/session7_h100/run6.sh
