#!/usr/bin/env bash
# Session 12, call 4: smaller programs for the flat tiling (1024 / 512 / 256 elements at 8 per thread).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
R=triton_v4,triton_v4@flat+tile=1024+warps=4,triton_v4@flat+tile=512+warps=2,triton_v4@flat+tile=256+warps=1
timeout 150 python -m scripts.bench_rope --variant full --head-dims --head-dim-list 18,22,50,66,130,254 --ropes $R --no-liger --no-compiled --out $OUT/full > $OUT/full.log 2>&1
grep -E "D=.*fwd" $OUT/full.log | sed 's/.*D=/D=/'
echo "at $(( $(date +%s) - T0 )) s"
timeout 150 python -m scripts.bench_rope --layouts --layout-dims 48,64,128 --ropes $R --no-liger --no-compiled --out $OUT/lay > $OUT/lay.log 2>&1
grep -E "layouts D=" $OUT/lay.log | sed 's/.*layouts //'
echo "at $(( $(date +%s) - T0 )) s"
timeout 200 python -m scripts.bench_rope --head-dims --head-dim-list 20,28,36,44,52,60,68,124,252,48,152 --ropes $R --no-liger --no-compiled --out $OUT/hd > $OUT/hd.log 2>&1
grep -E "D=.*fwd" $OUT/hd.log | sed 's/.*D=/D=/'
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz full lay hd && rm -rf full lay hd
