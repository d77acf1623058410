#!/usr/bin/env bash
# Session 13, call 6 (closing run, part 1): GPU tests of variant=full at every head dim; the head-dim sweep of
# variant=partial at every multiple of 4 from 16 to 256, at 32M (beside Liger and compiled torch) and 256M
# (beside Liger); layouts and rotary_dim.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 150 python -m pytest -q -x tests/rope/test_triton_gpu.py -k "every_head_dim and full" 2>&1 | tail -2 | tee $OUT/r/gpu_tests.txt
echo "tests at $(( $(date +%s) - T0 )) s"
timeout 230 python -m scripts.bench_rope --head-dims --head-dim-list every --ropes triton_v4 --out $OUT/r/hd32 > $OUT/r/hd32.log 2>&1
grep -E "D=.*fwd" $OUT/r/hd32.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //'
echo "at $(( $(date +%s) - T0 )) s"
timeout 130 python -m scripts.bench_rope --head-dims --head-dim-list every --elements 256M --ropes triton_v4 --no-compiled --out $OUT/r/hd256 > $OUT/r/hd256.log 2>&1
grep -E "D=.*fwd" $OUT/r/hd256.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //'
echo "at $(( $(date +%s) - T0 )) s"
timeout 80 python -m scripts.bench_rope --layouts --ropes triton_v4 --out $OUT/r/lay > $OUT/r/lay.log 2>&1
grep -E "layouts D=" $OUT/r/lay.log | sed 's/.*layouts //; s/fwd\/bwd % copy  //'
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
