#!/usr/bin/env bash
# Session 12, call 2: need-masked windows, lcm(D,4) tables
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 260 python -m pytest -q -x tests/rope/test_triton.py -k "identical_results and triton_v4" 2>&1 | tail -2 | tee $OUT/gpu_tests.txt
echo "tests $(( $(date +%s) - T0 )) s"
timeout 80 python -m scripts.bench_rope --variant full --head-dims --head-dim-list 18,22,30,50,66,130,254 --ropes triton_v4 --no-compiled --out $OUT/full > $OUT/full.log 2>&1
grep -E "D=" $OUT/full.log | sed 's/.*D=/D=/' | tail -9
timeout 70 python -m scripts.bench_rope --layouts --layout-dims 48,64 --ropes triton_v4 --no-liger --no-compiled --out $OUT/lay > $OUT/lay.log 2>&1
grep -E "layouts D=" $OUT/lay.log | sed 's/.*layouts //'
echo "at $(( $(date +%s) - T0 )) s"
timeout 150 python -m scripts.bench_rope --head-dims --head-dim-list 20,28,36,44,52,60,68,124,252,152 --ropes triton_v4,triton_v4@flat --no-liger --no-compiled --out $OUT/hd > $OUT/hd.log 2>&1
grep -E "D=" $OUT/hd.log | sed 's/.*D=/D=/' | tail -28
echo "at $(( $(date +%s) - T0 )) s"


echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz full lay hd && rm -rf full lay hd packed
