#!/usr/bin/env bash
# Session 12, call 3: launch variants of the flat tiling at odd halves and rotary_dim < D.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
R=triton_v4,triton_v4@flat+stream,triton_v4@flat+warps=4,triton_v4@flat+tile=1024+warps=4,triton_v4@flat+tile=4096+warps=16,triton_v4@flat+warps=16
timeout 150 python -m scripts.bench_rope --variant full --head-dims --head-dim-list 18,50,130,254 --ropes $R --no-liger --no-compiled --out $OUT/full > $OUT/full.log 2>&1
grep -E "D=" $OUT/full.log | sed 's/.*D=/D=/' | tail -5
echo "at $(( $(date +%s) - T0 )) s"
timeout 120 python -m scripts.bench_rope --layouts --layout-dims 48 --ropes $R --no-liger --no-compiled --out $OUT/lay > $OUT/lay.log 2>&1
grep -E "layouts D=" $OUT/lay.log | sed 's/.*layouts //'
echo "at $(( $(date +%s) - T0 )) s"
timeout 120 python -m scripts.bench_rope --head-dims --head-dim-list 20,36,48 --ropes triton_v4,triton_v4@flat,triton_v4@flat+stream,triton_v4@flat+warps=4,triton_v4@flat+warps=16 --no-liger --no-compiled --out $OUT/hd > $OUT/hd.log 2>&1
grep -E "D=" $OUT/hd.log | sed 's/.*D=/D=/' | tail -4
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz full lay hd && rm -rf full lay hd
