# Session 33 call 4: the head-dim sweep at every odd half (variant full, D = 18, 22, ..., 254), --flush zero,
# --placements 3, triton_v4 alone: first this tree (FOLD at odd halves), then the commit's tree (.devrun/orig).
export PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader > $OUT/r/gpu.txt
git rev-parse HEAD > $OUT/r/commit.txt; git diff > $OUT/r/change.diff
for v in new orig; do
  if [ $v = new ]; then cd $PWD; else cd .devrun/orig; fi
  timeout 290 python -m scripts.bench_rope --budget-s 275 --variant full --head-dims --head-dim-list $(seq -s, 18 4 254) \
    --ropes triton_v4 --no-liger --no-compiled --placements 3 --flush zero --out $OUT/r/$v > $OUT/r/$v.log 2>&1
  cd - > /dev/null
  echo "== $v at $(( $(date +%s) - T0 )) s"
  grep -E "D=.*fwd" $OUT/r/$v.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | awk '{printf "%s ", $0; if (NR%4==0) print ""}'
  tail -n 4 $OUT/r/$v.log | cut -c1-300
done
