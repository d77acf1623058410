#!/usr/bin/env bash
# Session 28, call 4: Nsight Compute of one triton_v4 forward at 32M (D = 54, 114, 206, 128) as shipped and with
# session 27's hacks (planes: a warp-contiguous paired table, correct; tables_same and no_partner: timing only,
# wrong results): does the planes layout cut the L1 wavefronts it was meant to cut, and what do warps stall on?
set -u
export PYTHONPATH=$PWD
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader > $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
NCU=$(which ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
M1=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__data_pipe_lsu_wavefronts.sum,l1tex__data_pipe_lsu_wavefronts.sum.pct_of_peak_sustained_elapsed,smsp__sass_inst_executed_op_global_ld.sum,smsp__inst_executed.sum,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
M2=smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__warps_active.avg.pct_of_peak_sustained_active
cp rope/_triton_kernels.py /tmp/orig_k.py; cp rope/triton_rope.py /tmp/orig_r.py
for v in orig planes tables_same no_partner; do
  [ $v = orig ] || cp .devrun/s28/hack/k_$v.py rope/_triton_kernels.py
  [ $v = planes ] && cp .devrun/s28/hack/r_planes.py rope/triton_rope.py
  for m in 1 2; do
    eval MM=\$M$m
    timeout 200 $NCU --metrics $MM --csv -k regex:rope python .devrun/s28/ncu_one.py 54,114,206,128 > $OUT/r/ncu${m}_$v.csv 2> $OUT/r/ncu${m}_$v.err
    tail -2 $OUT/r/ncu${m}_$v.err
  done
  cp /tmp/orig_k.py rope/_triton_kernels.py; cp /tmp/orig_r.py rope/triton_rope.py
done
python - $OUT/r <<'PY'
import csv, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/ncu*.csv")):
    rows = [r for r in csv.reader(open(f)) if len(r) > 10]
    if not rows:
        print(os.path.basename(f), "no rows"); continue
    hdr = rows[0]; rows = rows[1:]
    mi, vi, idi = hdr.index("Metric Name"), hdr.index("Metric Value"), hdr.index("ID")
    by = {}
    for r in rows:
        by.setdefault(int(r[idi]), {})[r[mi]] = r[vi]
    for i in sorted(by):
        print(os.path.basename(f), i, " ".join(f"{k.replace('smsp__average_warps_issue_stalled_', 'st_')}={v}" for k, v in by[i].items()))
PY
