#!/usr/bin/env bash
# Session 15, call 4: the GPU suite of the Triton entries with the direct launch; the overhead mode again; the seed004
# step eager and compiled, paired rounds.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
timeout 270 python -m pytest -q -p no:cacheprovider tests/rope/test_triton_gpu.py tests/rope/test_triton.py > $OUT/r/gputests.log 2>&1
tail -n 6 $OUT/r/gputests.log
echo "at $(( $(date +%s) - T0 )) s"
timeout 90 python -m scripts.bench_rope --overhead --ropes triton_v4,liger --out $OUT/r/ovh > $OUT/r/ovh.log 2>&1
grep -E "^\|" $OUT/r/ovh/overhead.md
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger \
  --iters 480 --rounds 8 --out $OUT/r/step > $OUT/r/step.log 2>&1
tail -n 25 $OUT/r/step.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
