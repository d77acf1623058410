#!/usr/bin/env bash
# Session 14, call 2: variant=full odd halves at R2 mod 8 = 1, 7 (where words take 32 registers a thread with either
# table format): 16-bit elements (the default tables: split, paired at 7 from D = 200) against int32 words with
# split tables and with paired ones, side by side at 32M; then a second round at ten of them.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
P="--head-dims --no-liger --no-compiled --variant full"
E="triton_v4@elements,triton_v4@words+split,triton_v4@words+paired"
timeout 380 python -m scripts.bench_rope $P --head-dim-list 18,30,34,46,50,62,66,78,82,94,98,110,114,126,130,142,146,158,162,174,178,190,194,206,210,222,226,238,242,254 \
  --ropes $E --out $OUT/r/w1 > $OUT/r/w1.log 2>&1
grep -E "D=.*fwd" $OUT/r/w1.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4@//g' | sed "s/^/r1 /"
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 560 - $(date +%s) + T0 )) python -m scripts.bench_rope $P --head-dim-list 18,30,66,98,130,162,194,210,226,254 \
  --ropes $E --out $OUT/r/w2 > $OUT/r/w2.log 2>&1
grep -E "D=.*fwd" $OUT/r/w2.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4@//g' | sed "s/^/r2 /"
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
