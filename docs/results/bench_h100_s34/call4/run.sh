# Session 34 call 4: placement_probe.py at the four odd halves that read under 93 in every sweep of calls 2-3
# (114, 182, 198, 206), 210, their neighbours and rows (128), 10 input sets each at random addresses.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R; nvidia-smi --query-gpu=name,uuid --format=csv,noheader > $R/gpu.txt
timeout 300 python .devrun/s34/placement_probe.py 182,206,198,114,210,186,202,190,110,118,128 10 2>&1 | tee $R/probe.log
timeout 200 python -m scripts.bench_rope --budget-s 190 --variant full --head-dims --head-dim-list 182,206,198,114,210,186,202,190,110,118 \
  --ropes triton_v4 --no-liger --no-compiled --placements 3 --flush zero --out $R/bench > $R/bench.log 2>&1
grep "D=" $R/bench.log | sed 's/.*D=/D=/'
