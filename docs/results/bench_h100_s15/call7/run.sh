#!/usr/bin/env bash
# Session 15, call 7: joint programs at the mid odd halves (D = 54 ... 170), default words/paired and forced
# words+paired, beside apart and Liger; the partial R2 = 2 mod 8 family joint; a few odd halves at 256M.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
R="triton_v4@apart,triton_v4@joint,triton_v4@joint+words+paired"
timeout 330 python -m scripts.bench_rope --budget-s 320 --variant full --head-dims \
  --head-dim-list 54,58,62,66,70,74,78,82,86,90,94,102,106,110,114,118,122,126,134,138,142,146,150,154,158,162,166,170 \
  --ropes $R --no-compiled --out $OUT/r/full > $OUT/r/full.log 2>&1
grep -E "D=.*fwd" $OUT/r/full.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed 's/^/full /'
echo "at $(( $(date +%s) - T0 )) s"
timeout 100 python -m scripts.bench_rope --budget-s 90 --head-dims --head-dim-list 36,52,68,100,148,212,244 \
  --ropes triton_v4@apart,triton_v4@joint --no-compiled --out $OUT/r/part > $OUT/r/part.log 2>&1
grep -E "D=.*fwd" $OUT/r/part.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed 's/^/part /'
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 570 - $(date +%s) + T0 )) --variant full --head-dims \
  --head-dim-list 254,194,130 --elements 256M --ropes triton_v4@apart,triton_v4@joint+words+paired --no-compiled \
  --out $OUT/r/f256 > $OUT/r/f256.log 2>&1
grep -E "D=.*fwd" $OUT/r/f256.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed 's/^/f256 /'
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
