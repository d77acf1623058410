# Session 30, call 5: after the fixes (48e4bd0..0ce60b8): full disk on a real tmpfs, the leak, the interpreter skips
bash .whl/install.sh >/dev/null 2>&1 || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline ROPELAB_CACHE=/tmp/rlcache
mkdir -p $OUT/r; nvidia-smi -L > $OUT/r/gpu.txt
timeout 200 python -m pytest -q -p no:cacheprovider -rs tests/scripts/test_profile_step.py tests/scripts/test_liger_adapter.py \
  tests/scripts/test_bench_rope.py tests/llm/training/test_faults.py tests/llm/test_generate.py tests/experiments/test_fidelity.py \
  --deselect tests/llm/training/test_faults.py::test_printed_resume_command_runs_to_the_end > $OUT/r/tests5.log 2>&1
echo "pytest exit $?" >> $OUT/r/tests5.log
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/r/tests5.log | head -20; grep "^SKIPPED" $OUT/r/tests5.log | cut -c1-150
