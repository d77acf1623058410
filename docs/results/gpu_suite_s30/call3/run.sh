# Session 30, call 3: tracebacks of one failing test of each group of call 2
bash .whl/install.sh >/dev/null 2>&1 || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline ROPELAB_CACHE=/tmp/rlcache
mkdir -p $OUT/r
timeout 170 python -m pytest -q -p no:cacheprovider --tb=short \
  "tests/scripts/test_bench_step.py::test_rounds_interleave_the_ropes_and_pair_them_by_round" \
  "tests/llm/training/test_faults.py::test_train_time_and_tokens_add_up_across_a_resume" \
  "tests/llm/test_entry_point.py::test_a_new_run_never_writes_over_a_finished_one" \
  "tests/llm/test_generate.py::test_generation_stops_at_the_end_of_the_context" > $OUT/r/tests3.log 2>&1
echo "pytest exit $?" >> $OUT/r/tests3.log
grep -E "^E |Error|error" $OUT/r/tests3.log | head -60; tail -8 $OUT/r/tests3.log
