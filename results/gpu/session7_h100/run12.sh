# session 7 run5 (H100, right after run4): ../shared/peers/install 1 by hand (../shared is not copied to
# the device): carry [".deps/peers/part1"]
cp .deps/peers/part1/cu13.tar.xz.00 /tmp/ && echo kept
