# Session 32, call 1 (two GPUs): the two-GPU conformance test, then session 30's call-2 set (the suite but the
# files session 30's call 1 ran), in parallel workers with a per-test timeout so that a hang names its test.
bash .whl/install.sh >/dev/null 2>&1 || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
timeout 170 python -m pytest -v -p no:cacheprovider tests/rope/test_conformance.py -k another_gpu > $R/twogpu.log 2>&1
echo "pytest exit $?" >> $R/twogpu.log; tail -4 $R/twogpu.log
timeout 380 python -m pytest -q -p no:cacheprovider -n 12 --timeout 200 --durations=25 -rfE \
  tests/scripts tests/llm tests/report tests/experiments tests/rope \
  --ignore=tests/rope/test_triton_gpu.py --ignore=tests/rope/test_liger.py --ignore=tests/llm/test_generate_gpu.py \
  --ignore=tests/scripts/test_bench_rope.py --ignore=tests/rope/test_conformance.py > $R/rest.log 2>&1
echo "pytest exit $?" >> $R/rest.log
grep -E "^(FAILED|ERROR)" $R/rest.log | head -40; tail -3 $R/rest.log
