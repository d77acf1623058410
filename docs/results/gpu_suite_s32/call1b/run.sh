# Session 32, call 1b (call 1's machine, still warm): call 1's 8 failures again, one process, no workers.
bash .whl/install.sh >/dev/null 2>&1; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline; mkdir -p $OUT/r
T="tests/llm/training/test_train.py::test_cli_run_writes_every_output tests/rope/test_plugin.py::test_trains_through_hydra
 tests/rope/test_triton.py::test_positions_out_of_range
 tests/llm/test_entry_point.py::test_a_sweep_runs_two_jobs_at_once_through_the_joblib_launcher
 tests/llm/test_entry_point.py::test_the_gpu_launcher_preset_runs_one_job_per_gpu
 tests/llm/test_eval_lengths.py::test_the_training_length_reproduces_the_training_eval_on_the_same_tokens_at_every_length"
timeout 400 python -m pytest -q -p no:cacheprovider --timeout 200 -x -rfE $T > $OUT/r/serial.log 2>&1; echo "exit $?" >> $OUT/r/serial.log
python -m pytest -q -p no:cacheprovider --timeout 200 -rfE $T > $OUT/r/serial_all.log 2>&1; tail -15 $OUT/r/serial_all.log
