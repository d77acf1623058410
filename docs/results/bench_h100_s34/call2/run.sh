# Session 34 call 2 (call 3 ran it again on the same warm machine with `for i in c d e f`): the 60 odd halves under --flush zero,
# repeated sweeps on one machine (triton_v4 alone, --placements 3), to see how far repeated sweeps of the same code scatter per head dim.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader > $R/gpu.txt; git rev-parse HEAD > $R/commit.txt; git diff > $R/change.diff
for i in a b; do
  timeout 290 python -m scripts.bench_rope --budget-s 280 --variant full --head-dims --head-dim-list $(seq -s, 18 4 254) \
    --ropes triton_v4 --no-liger --no-compiled --placements 3 --flush zero --out $R/zero_$i > $R/zero_$i.log 2>&1
  echo "== $i at $(( $(date +%s) - T0 )) s: $(grep -c 'D=' $R/zero_$i.log) head dims"; tail -n 3 $R/zero_$i.log | cut -c1-200
done
