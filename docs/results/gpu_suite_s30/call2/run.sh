# Session 30, call 2: the rest of the test suite on a GPU host (call 1 ran five files)
bash .whl/install.sh >/dev/null 2>&1 || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline ROPELAB_CACHE=/tmp/rlcache
mkdir -p $OUT/r; nvidia-smi -L | tee $OUT/r/gpu.txt
python -c "import scipy" 2>&1 | tail -1
timeout 540 python -m pytest -v -p no:cacheprovider --durations=15 tests/scripts tests/llm tests/report tests/experiments tests/rope \
  --ignore=tests/rope/test_triton_gpu.py --ignore=tests/rope/test_liger.py --ignore=tests/llm/test_generate_gpu.py \
  --ignore=tests/scripts/test_bench_rope.py --ignore=tests/rope/test_conformance.py > $OUT/r/tests2.log 2>&1
echo "pytest exit $?" >> $OUT/r/tests2.log
grep -c PASSED $OUT/r/tests2.log; grep -E "FAILED|ERROR" $OUT/r/tests2.log | head -60; tail -5 $OUT/r/tests2.log
