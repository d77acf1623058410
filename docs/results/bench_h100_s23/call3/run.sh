#!/usr/bin/env bash
# Session 23, call 3: the host cost of the rotation's launch in a compiled graph (q and k as views of qkv or apart,
# torch against triton_v4), then the compiled seed004 step finely interleaved again, with the medians' bootstrap CI.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
python -c "import scipy; print('scipy', scipy.__version__)"
timeout 200 python .devrun/s23/launch_host.py > $OUT/r/launch_host.txt 2> $OUT/r/launch_host.log; cat $OUT/r/launch_host.txt
tail -n 3 $OUT/r/launch_host.log
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger \
  --modes compile --iters 2000 --rounds 1000 --out $OUT/r/step_fine > $OUT/r/step_fine.log 2>&1
tail -n 7 $OUT/r/step_fine.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
