#!/usr/bin/env bash
# Session 15, call 3: the flat tiling's block (VB = 8, 4, 2) side by side, odd halves and partial R2 = 2 mod 8, 32M;
# ncu of D = 254 at block 2 against call 1's block 8.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
timeout 60 python -m pytest -q -p no:cacheprovider tests/rope/test_triton_gpu.py -k "kept_plan or replaced_kernel" 2>&1 | tail -n 4
timeout 100 python -m scripts.bench_rope --overhead --ropes triton_v4,liger --out $OUT/r/ovh > $OUT/r/ovh.log 2>&1
grep -E "^\|" $OUT/r/ovh/overhead.md
echo "at $(( $(date +%s) - T0 )) s"
R="triton_v4,triton_v4@block=4,triton_v4@block=2"
timeout 170 python -m scripts.bench_rope --budget-s 160 --variant full --head-dims --head-dim-list 34,130,210,254 \
  --ropes $R --no-compiled --out $OUT/r/full > $OUT/r/full.log 2>&1
grep -E "D=.*fwd" $OUT/r/full.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed 's/^/full /'
echo "at $(( $(date +%s) - T0 )) s"
timeout 130 python -m scripts.bench_rope --budget-s 120 --head-dims --head-dim-list 36,100,212 \
  --ropes $R --no-compiled --out $OUT/r/part > $OUT/r/part.log 2>&1
grep -E "D=.*fwd" $OUT/r/part.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed 's/^/part /'
echo "at $(( $(date +%s) - T0 )) s"
NCU=$(which ncu)
for b in 2; do
timeout 80 $NCU --clock-control none --nvtx --nvtx-include "prof/" --kernel-name regex:rope_kernel --section SpeedOfLight \
  --metrics l1tex__data_pipe_lsu_wavefronts.sum,l1tex__data_pipe_lsu_wavefronts.sum.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,smsp__sass_inst_executed_op_global_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,launch__registers_per_thread \
  python docs/results/bench_h100_s15/call1/ncu_one.py full 254 block=$b > $OUT/r/ncu254_b$b.txt 2>&1
grep -E "Duration|Throughput|wavefronts|sectors|bytes_read|inst_executed|registers" $OUT/r/ncu254_b$b.txt | sed "s/^/b$b /"
done
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
