#!/usr/bin/env bash
# Session 23, call 1: the compiled seed004 step timed finely interleaved (1000 rounds of 2 steps a rope) and as
# before (16 rounds of 60), with the GPU's clocks and power logged; the copy's own fixed cost.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 60 python .devrun/s23/copy_fixed.py > $OUT/r/copy_fixed.txt 2>&1; cat $OUT/r/copy_fixed.txt
echo "at $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 250 > $OUT/r/smi_fine.csv 2>&1 &
SMI=$!
timeout 300 python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger \
  --modes compile --iters 2000 --rounds 1000 --out $OUT/r/step_fine > $OUT/r/step_fine.log 2>&1
kill $SMI
tail -n 7 $OUT/r/step_fine.log
echo "at $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 250 > $OUT/r/smi_blocks.csv 2>&1 &
SMI=$!
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger \
  --modes compile --iters 960 --rounds 16 --out $OUT/r/step_blocks > $OUT/r/step_blocks.log 2>&1
kill $SMI
tail -n 7 $OUT/r/step_blocks.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
