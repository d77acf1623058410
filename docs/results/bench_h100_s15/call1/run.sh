#!/usr/bin/env bash
# Session 15, call 1: ncu profiles of the rope kernel (fwd + bwd, 32M elements) at good and bad geometries.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
which ncu || ls /opt/nvidia/nsight-compute/*/ncu
NCU=$(which ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for g in "full 34" "full 130" "full 254" "partial 36" "partial 48" "full 128" "partial 100"; do
  set -- $g; tag=$1_$2
  timeout 150 $NCU --clock-control none --nvtx --nvtx-include "prof/" --kernel-name regex:rope_kernel --set full \
     -o $OUT/r/$tag -f python docs/results/bench_h100_s15/call1/ncu_one.py $1 $2 > $OUT/r/$tag.log 2>&1
  tail -n 3 $OUT/r/$tag.log
  $NCU --import $OUT/r/$tag.ncu-rep --page details > $OUT/r/$tag.details.txt 2>&1
  $NCU --import $OUT/r/$tag.ncu-rep --page raw --csv > $OUT/r/$tag.raw.csv 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Registers Per|Achieved Occupancy|Theoretical Occ" $OUT/r/$tag.details.txt | sed "s/^/$tag /"
  echo "at $(( $(date +%s) - T0 )) s"
  [ $(( $(date +%s) - T0 )) -gt 480 ] && break
done
rm -f $OUT/r/*.ncu-rep.bak
cd $OUT && tar czf res.tgz r && rm -rf r
