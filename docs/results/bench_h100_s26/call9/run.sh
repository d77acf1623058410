#!/usr/bin/env bash
# Session 26, call 9: Nsight Compute, no cache control: DRAM bytes read and written and L2 sectors of triton_v4's
# forward (32M, variant full) after the zero flush, a read flush, and its own call (steady); a one-launch copy too.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
NCU=$(which ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum
timeout 400 $NCU --clock-control none --cache-control none --nvtx --nvtx-include "prof/" --metrics $M --csv \
  python .devrun/s26/ncu_prior.py 54 56 114 116 128 206 > $OUT/r/ncu_prior.csv 2> $OUT/r/ncu_prior.err
tail -n 5 $OUT/r/ncu_prior.err
python - <<'PY' $OUT/r/ncu_prior.csv
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ki, mi, vi, ui = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value"), hdr.index("Metric Unit")
idi = hdr.index("ID")
by = {}
for r in rows:
    by.setdefault(int(r[idi]), {"kernel": r[ki][:30]})[r[mi]] = r[vi] + r[ui]
for i in sorted(by):
    d = by[i]
    print(i, d["kernel"], " ".join(f"{k.split('.')[0].replace('lts__t_sectors_op_','L2 ').replace('dram__bytes_','dram ')}={d[k]}" for k in d if k != "kernel"))
PY
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
