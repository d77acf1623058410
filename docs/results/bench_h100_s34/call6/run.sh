# Session 34 call 6: on one machine, the benchmark's own placements (two sweeps) and 10 random placements
# (placement_probe.py) at the head dims that missed 93 in calls 1-4, to tell placement from machine.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R; nvidia-smi --query-gpu=name,uuid --format=csv,noheader > $R/gpu.txt
for i in a b; do
timeout 150 python -m scripts.bench_rope --budget-s 140 --variant full --head-dims --head-dim-list 182,206,198,114,238,186 \
  --ropes triton_v4 --no-liger --no-compiled --placements 3 --flush zero --out $R/bench_$i > $R/bench_$i.log 2>&1
grep "D=" $R/bench_$i.log | sed 's/.*D=/D=/'
done
timeout 200 python docs/results/bench_h100_s34/scripts/placement_probe.py 182,206,198,114,238,186 10 2>&1 | tee $R/probe.log
