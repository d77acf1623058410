# Session 32, call 2 (two GPUs): call 1's failures again with the test fixes and Hydra's launcher plugins carried;
# then the two-GPU test with the launches' device switch taken out (it must fail for the Triton and Liger entries).
bash .whl/install.sh >/dev/null 2>&1 || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
timeout 300 python -m pytest -v -p no:cacheprovider --timeout 200 -rfE tests/llm/training/test_train.py::test_cli_run_writes_every_output \
  tests/rope/test_plugin.py tests/rope/test_triton.py::test_positions_out_of_range tests/llm/test_entry_point.py \
  tests/llm/test_eval_lengths.py -n 12 > $R/again.log 2>&1
echo "pytest exit $?" >> $R/again.log; tail -3 $R/again.log
sed -i 's/^    return device >= 0 and torch.cuda.current_device() != device$/    return False  # BROKEN ON PURPOSE/' rope/triton_rope.py
sed -i 's/^    if x.is_cuda and x.get_device() != torch.cuda.current_device():$/    if False:  # BROKEN ON PURPOSE/' rope/base.py
grep -c "BROKEN ON PURPOSE" rope/triton_rope.py rope/base.py
timeout 150 python -m pytest -q -p no:cacheprovider -rfE tests/rope/test_conformance.py -k another_gpu > $R/broken.log 2>&1
echo "pytest exit $?" >> $R/broken.log; grep -E "^(FAILED|ERROR)|passed|failed" $R/broken.log | cut -c1-200
