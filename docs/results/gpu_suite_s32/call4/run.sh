# Session 32, call 4 (one GPU): the triton ops now defined through rope.triton_rope.traced_ops (at import on a CUDA
# build, as before): the GPU tests of the Triton entries and the compiled paths, the standalone and entry-point tests.
bash .whl/install.sh >/dev/null 2>&1 || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
python -c "import sys, rope.triton_rope as tr; print('TRACED_OPS defined:', tr.TRACED_OPS is not None, tr.TRACED_OPS is tr.traced_ops(), tr._TRACEABLE)" | tee $R/traced.txt
timeout 500 python -m pytest -q -p no:cacheprovider -n 12 --timeout 300 -rfE tests/rope/test_triton_gpu.py tests/rope/test_triton.py \
  tests/llm/test_compile_model.py tests/rope/test_standalone.py tests/llm/test_entry_point.py > $R/tests.log 2>&1
echo "pytest exit $?" >> $R/tests.log; tail -4 $R/tests.log
