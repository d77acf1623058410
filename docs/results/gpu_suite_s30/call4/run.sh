# Session 30, call 4: the fixes of calls 1-3 on a GPU host (interpreter-only tests skip; SMALL's val split)
bash .whl/install.sh >/dev/null 2>&1 || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline ROPELAB_CACHE=/tmp/rlcache
mkdir -p $OUT/r; nvidia-smi -L > $OUT/r/gpu.txt
timeout 300 python -m pytest -q -p no:cacheprovider -rs tests/scripts/test_bench_rope.py tests/scripts/test_bench_step.py \
  tests/scripts/test_liger_adapter.py tests/llm/training/test_faults.py tests/llm/test_generate.py \
  "tests/llm/test_entry_point.py::test_a_new_run_never_writes_over_a_finished_one" > $OUT/r/tests4.log 2>&1
echo "pytest exit $?" >> $OUT/r/tests4.log
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/r/tests4.log | head -30; grep -c "^SKIPPED" $OUT/r/tests4.log
