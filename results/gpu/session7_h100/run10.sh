# session 7 run10 (H100, warm right after run9, its build): add_rmsnorm rule default vs wide at 1-256 rows
B=build-gpu/bench/blockfuse; for r in default wide; do timeout 60 $B bench add-rmsnorm --hidden 4096,8192,16384 --rows 1,8,32,256 --fp8 all --rule $r --json $OUT/add_rmsnorm_small_rule_$r.json > /dev/null 2>&1; echo "rule $r rc $?"; done  # + the summary printer of run9
