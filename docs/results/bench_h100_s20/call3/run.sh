#!/usr/bin/env bash
# Session 20, call 3: Nsight Compute of the default kernels (fwd + bwd, 32M elements): odd halves joint (full D = 54,
# 150), R2 = 6 mod 8 apart (partial D = 60: 95%), rows (full D = 128), to see what bounds the odd halves now.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
NCU=$(which ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for g in "full 54" "full 150" "partial 60" "full 128"; do
  set -- $g; tag=$1_$2
  timeout 150 $NCU --clock-control none --nvtx --nvtx-include "prof/" --kernel-name regex:rope_kernel --set full \
     -o $OUT/r/$tag -f python docs/results/bench_h100_s15/call1/ncu_one.py $1 $2 > $OUT/r/$tag.log 2>&1
  tail -n 2 $OUT/r/$tag.log
  $NCU --import $OUT/r/$tag.ncu-rep --page details > $OUT/r/$tag.details.txt 2>&1
  $NCU --import $OUT/r/$tag.ncu-rep --page raw --csv > $OUT/r/$tag.raw.csv 2>&1; gzip -f $OUT/r/$tag.raw.csv
  rm -f $OUT/r/$tag.ncu-rep
  grep -E "^  [a-z_]+|Duration|DRAM Throughput|L1/TEX Hit|L2 Hit|L1/TEX Cache Throughput|L2 Cache Throughput|Registers Per|Achieved Occupancy" $OUT/r/$tag.details.txt | sed "s/^/$tag /"
  echo "at $(( $(date +%s) - T0 )) s"
  [ $(( $(date +%s) - T0 )) -gt 450 ] && break
done
cd $OUT && tar czf res.tgz r && rm -rf r
