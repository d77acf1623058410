# Session 34 call 1: the GPU tests on the final kernel (FOLD, da04bae+), then the 60 odd halves under both
# flushes on this one machine (triton_v4 alone, --placements 3).
bash .whl/install.sh >/dev/null 2>&1 || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader > $R/gpu.txt; git rev-parse HEAD > $R/commit.txt; git diff > $R/change.diff
timeout 215 python -m pytest -q -p no:cacheprovider -n 8 --timeout 200 -rfE tests/rope/test_triton_gpu.py > $R/tests.log 2>&1
echo "pytest exit $?" >> $R/tests.log; grep -E "^(FAILED|ERROR)" $R/tests.log | head; tail -2 $R/tests.log
echo "== tests done at $(( $(date +%s) - T0 )) s"
for f in zero steady; do
  timeout 170 python -m scripts.bench_rope --budget-s 160 --variant full --head-dims --head-dim-list $(seq -s, 18 4 254) \
    --ropes triton_v4 --no-liger --no-compiled --placements 3 --flush $f --out $R/$f > $R/$f.log 2>&1
  echo "== $f at $(( $(date +%s) - T0 )) s"; tail -n 5 $R/$f.log | cut -c1-300
done
