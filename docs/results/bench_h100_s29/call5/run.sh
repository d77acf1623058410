export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/r && nvidia-smi -L > $OUT/r/gpu.txt && cp .devrun/commit.txt $OUT/r/
for v in partial full; do
  timeout 280 python -m scripts.bench_rope --head-dims --variant $v --head-dim-list $(seq -s, 16 4 256) --ropes triton_v4 --no-liger --no-compiled --placements 3 --flush zero --budget-s 265 --out $OUT/r/$v > $OUT/r/$v.log 2>&1
  grep -E "all done|not measured" $OUT/r/$v.log
done
cd $OUT && tar czf r.tgz r && rm -rf r
