#!/usr/bin/env bash
# Session 25, call 9: the seed004 step under torch.compile (default mode) and under CUDA graphs (mode=reduce-overhead),
# finely interleaved, one machine.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout 540 python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger \
  --modes cudagraphs,compile --iters 1200 --rounds 600 --out $OUT/r/step_modes > $OUT/r/step_modes.log 2>&1
tail -n 9 $OUT/r/step_modes.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
