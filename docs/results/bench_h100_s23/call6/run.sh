#!/usr/bin/env bash
# Session 23, call 6: the rotation launch's host cost in a compiled chain Inductor cannot fuse (torch vs triton_v4).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
rm -rf /tmp/torchinductor_root
TORCH_LOGS=output_code timeout 300 python .devrun/s23/launch_chain_sdpa.py > $OUT/r/launch_chain_sdpa.txt 2> $OUT/r/launch_chain_sdpa.log
head -n 5 $OUT/r/launch_chain_sdpa.txt
grep -A12 "cProfile, " $OUT/r/launch_chain_sdpa.txt | grep -E "====|launch_kernel|heuristics|static_triton|empty_strided|reinterpret|launcher|function calls"
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
