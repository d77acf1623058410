#!/usr/bin/env bash
# Session 13, call 2: the element table of period D (cos and sin side by side, unmasked) against HEAD's
# (14a7907: two tables of period lcm(D, 4)), A/B on one machine, two rounds; GPU tests of the new table;
# host overhead (paired loops).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONUNBUFFERED=1
ROOT=$PWD
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
export PYTHONPATH=/tmp/site:$ROOT
timeout 200 python -m pytest -q -x tests/rope/test_triton_gpu.py -k "every_head_dim or layout_positions" 2>&1 | tail -2 | tee $OUT/gpu_tests.txt
timeout 120 python -m pytest -q -x tests/rope/test_triton.py -k "identical_results and triton_v4" 2>&1 | tail -1 | tee -a $OUT/gpu_tests.txt
echo "tests at $(( $(date +%s) - T0 )) s"
FULL="--variant full --head-dims --head-dim-list 18,22,26,66,130,194,254"
HD="--head-dims --head-dim-list 20,28,36,52,68,252"
LAY="--layouts --layout-dims 48,64,128"
for round in 1 2; do
  for side in old new; do
    if [ $side = old ]; then cd $ROOT/.devrun/old; export PYTHONPATH=/tmp/site:$ROOT/.devrun/old; else cd $ROOT; export PYTHONPATH=/tmp/site:$ROOT; fi
    timeout 90 python -m scripts.bench_rope $FULL --ropes triton_v4 --no-liger --no-compiled --out $OUT/full_${side}_$round > $OUT/full_${side}_$round.log 2>&1
    grep -E "D=.*fwd" $OUT/full_${side}_$round.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//' | sed "s/^/$side$round /"
    timeout 90 python -m scripts.bench_rope $HD --ropes triton_v4 --no-liger --no-compiled --out $OUT/hd_${side}_$round > $OUT/hd_${side}_$round.log 2>&1
    grep -E "D=.*fwd" $OUT/hd_${side}_$round.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//' | sed "s/^/$side$round /"
    if [ $round = 1 ]; then
      timeout 90 python -m scripts.bench_rope $LAY --ropes triton_v4 --no-liger --no-compiled --out $OUT/lay_${side} > $OUT/lay_${side}.log 2>&1
      grep -E "layouts D=" $OUT/lay_${side}.log | sed 's/.*layouts //' | sed "s/^/$side /"
    fi
    echo "at $(( $(date +%s) - T0 )) s"
  done
done
cd $ROOT; export PYTHONPATH=/tmp/site:$ROOT
timeout 120 python -m scripts.bench_rope --overhead --ropes triton_v4 --out $OUT/ovh > $OUT/ovh.log 2>&1
grep -E "^\|" $OUT/ovh/overhead.md | head -40
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz full_* hd_* lay_* ovh && rm -rf full_old_? full_new_? hd_old_? hd_new_? lay_old lay_new ovh
