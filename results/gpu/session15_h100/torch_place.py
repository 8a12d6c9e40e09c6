"""Session 15, call 6 (issue 17): add_rmsnorm through torch at H = 4096 / 16384 x 8192 / 32768 rows,
bf16 out, with the buffers' addresses recorded and moved: a pad of P MiB allocated before x, residual
and the outputs; out-of-place (torch.ops.blockfuse.add_rmsnorm: two new outputs) and in place
(add_rmsnorm_: residual_out over residual). Timed as bench/memory_bound_baselines.py times large rows
(20 back-to-back calls between events, median of 3)."""
import json
import sys

import torch

sys.path.insert(0, "bench")
from memory_bound_baselines import load_blockfuse, time_batched  # noqa: E402

bo = load_blockfuse()
bf = torch.bfloat16
rows_out = []
copy_gbs = None
for h in (4096, 16384):
    for m in (8192, 32768):
        for pad in (0, 2, 6, 64):
            pads = [torch.empty(pad << 20, dtype=torch.uint8, device="cuda") for _ in range(3)] if pad else []
            x = torch.rand(m, h, dtype=bf, device="cuda") * 2 - 1
            if pad:
                pads.append(torch.empty(pad << 20, dtype=torch.uint8, device="cuda"))
            r = torch.rand(m, h, dtype=bf, device="cuda") * 2 - 1
            w = torch.randn(h, dtype=bf, device="cuda")
            out, ro = bo.add_rmsnorm(x, r, w, 1e-6)
            offs = [(t.data_ptr() - x.data_ptr()) >> 20 for t in (r, ro, out)]
            del out, ro
            us = time_batched(lambda i: bo.add_rmsnorm(x, r, w, 1e-6), 1)
            r2 = r.clone()
            us_ip = time_batched(lambda i: bo.add_rmsnorm_(x, r2, w, 1e-6), 1)
            nb = 3 * m * h * 2 + 2 * h + 2 * m * h
            row = {"H": h, "rows": m, "pad_mb": pad, "res_ro_out_minus_x_mb": offs, "us": us, "us_in_place": us_ip,
                   "gbs": nb / (us * 1e3), "gbs_in_place": nb / (us_ip * 1e3)}
            rows_out.append(row)
            print(f"H={h:5d} rows={m:5d} pad {pad:3d} MiB  offsets res/ro/out - x {offs} MiB  "
                  f"out-of-place {us:8.2f} us ({row['gbs']:5.0f} GB/s)  in place {us_ip:8.2f} us ({row['gbs_in_place']:5.0f} GB/s)",
                  flush=True)
            del x, r, r2, w, pads
            torch.cuda.empty_cache()
json.dump({"device": torch.cuda.get_device_name(), "rows": rows_out}, open(sys.argv[1], "w"), indent=1)
