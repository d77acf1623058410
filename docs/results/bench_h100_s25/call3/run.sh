#!/usr/bin/env bash
# Session 25, call 3: the compiled seed004 step under torch.compile(mode="reduce-overhead") (CUDA graphs: the host's
# launch cost hidden), none / torch / triton_v4, with scripts.profile_step; then the default mode the same way.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout 280 python -m scripts.profile_step --model seed004 --ropes none,torch,triton_v4 --mode reduce-overhead \
  --iters 60 --prof-steps 5 > $OUT/r/profile_ro.txt 2> $OUT/r/profile_ro.log
sed -n 1,20p $OUT/r/profile_ro.txt; tail -n 3 $OUT/r/profile_ro.log
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 560 - $(date +%s) + T0 )) python -m scripts.profile_step --model seed004 --ropes none,torch,triton_v4 \
  --iters 60 --prof-steps 5 > $OUT/r/profile_default.txt 2> $OUT/r/profile_default.log
sed -n 1,20p $OUT/r/profile_default.txt
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
