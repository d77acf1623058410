#!/usr/bin/env bash
# Session 12, call 5 (code f138bf5): GPU tests of the flat tiling, then the odd-half and layout rows beside Liger.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 150 python -m pytest -q -x tests/rope/test_triton.py -k "identical_results and triton_v4 and half" 2>&1 | tail -1 | tee $OUT/gpu_tests.txt
timeout 100 python -m pytest -q tests/rope/test_triton_gpu.py -k "compile or launches" 2>&1 | tail -1 | tee -a $OUT/gpu_tests.txt
timeout 120 python -m pytest -q tests/rope/test_conformance.py -k "triton_v4 and (rotary or full or packed)" 2>&1 | tail -1 | tee -a $OUT/gpu_tests.txt
echo "tests $(( $(date +%s) - T0 )) s"
timeout 90 python -m scripts.bench_rope --variant full --head-dims --head-dim-list 18,22,26,30,34,50,66,98,130,194,254 --ropes triton_v4 --out $OUT/full > $OUT/full.log 2>&1
grep -E "D=.*fwd" $OUT/full.log | sed 's/.*D=/D=/'
echo "at $(( $(date +%s) - T0 )) s"
timeout 110 python -m scripts.bench_rope --layouts --layout-dims 48,64,128 --ropes triton_v4 --out $OUT/lay > $OUT/lay.log 2>&1
grep -E "layouts D=" $OUT/lay.log | sed 's/.*layouts //'
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz full lay && rm -rf full lay
