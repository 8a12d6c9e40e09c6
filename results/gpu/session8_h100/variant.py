"""Session 8 experiment (applied on the device to a copy of the tree, never committed as source): rewrites
src/swiglu/kernels.cuh's elementwise kernel.
  fastact: SiLU as __fdividef(g, 1 + __expf(-g)) (MUFU ex2 + rcp, no IEEE division or accurate expf)
  idx32:   the chunk -> (row, column) split in 32-bit arithmetic (the grid's chunks < 2^31 here)
Usage: python3 variant.py fastact|idx32"""
import sys

p = "src/swiglu/kernels.cuh"
s = open(p).read()
which = sys.argv[1]
if which == "fastact":
    old = "      for (int j = 0; j < 8; ++j) v[j] = gated_act(act, g[j], up[j]);\n      if constexpr (kOut"
    new = ("      for (int j = 0; j < 8; ++j) v[j] = (act == 0 ? __fdividef(g[j], 1.0f + __expf(-g[j])) : gelu_tanh_f32(g[j])) * up[j];\n"
           "      if constexpr (kOut")
elif which == "idx32":
    old = """      r[i] = idx / chunks_per_row;
      c[i] = (idx - r[i] * chunks_per_row) * 8;"""
    new = """      const unsigned q = unsigned(idx) / unsigned(chunks_per_row);
      r[i] = q;
      c[i] = int64_t(unsigned(idx) - q * unsigned(chunks_per_row)) * 8;"""
else:
    sys.exit("variant.py: fastact or idx32")
assert s.count(old) == 1, which
open(p, "w").write(s.replace(old, new))
print("variant", which, "applied")
