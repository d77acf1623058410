#!/usr/bin/env bash
# Session 23, call 4: a cProfile of the compiled rotation's launch, torch against triton_v4, and Inductor's code.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
TORCH_LOGS=output_code timeout 300 python .devrun/s23/launch_prof.py > $OUT/r/launch_prof.txt 2> $OUT/r/launch_prof.log
grep -A3 "autotuner" $OUT/r/launch_prof.txt | head -20
grep -B2 -A30 "cProfile, triton_v4" $OUT/r/launch_prof.txt | head -45
echo "at $(( $(date +%s) - T0 )) s"
cp /tmp/torchinductor_*/*/*.py $OUT/r/ 2>/dev/null; ls $OUT/r | head
cd $OUT && tar czf res.tgz r && rm -rf r
