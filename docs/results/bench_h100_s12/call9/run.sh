#!/usr/bin/env bash
# Session 12, call 9: no pass-through select without a tail; GPU identity test and the closing odd-half rows.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 170 python -m pytest -q -x tests/rope/test_triton.py -k "identical_results and triton_v4" 2>&1 | tail -1 | tee $OUT/gpu_tests.txt
echo "tests $(( $(date +%s) - T0 )) s"
timeout 90 python -m scripts.bench_rope --variant full --head-dims --head-dim-list 18,22,26,30,34,50,66,98,130,194,254 --ropes triton_v4 --out $OUT/full > $OUT/full.log 2>&1
grep -E "D=.*fwd" $OUT/full.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//'
echo "at $(( $(date +%s) - T0 )) s"
timeout 100 python -m scripts.bench_rope --head-dims --head-dim-list 20,28,36,44,52,60,124,252 --ropes triton_v4 --no-compiled --out $OUT/hd > $OUT/hd.log 2>&1
grep -E "D=.*fwd" $OUT/hd.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//'
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz full hd && rm -rf full hd
