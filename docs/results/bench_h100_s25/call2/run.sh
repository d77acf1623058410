#!/usr/bin/env bash
# Session 25, call 2: the compiled seed004 step finely interleaved (1000 rounds of 2 steps a rope) at 1be802b (another machine than call 1's; pooled with session 24's calls 4 and 5: same code paths)
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 250 > $OUT/r/smi_fine.csv 2>&1 &
SMI=$!
timeout 320 python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger \
  --modes compile --iters 2000 --rounds 1000 --out $OUT/r/step_fine > $OUT/r/step_fine.log 2>&1
kill $SMI
tail -n 7 $OUT/r/step_fine.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
