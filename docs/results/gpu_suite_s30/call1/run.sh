# Session 30, call 1: the GPU tests at HEAD (copy_heads under on_device_of has not run on a GPU yet)
bash .whl_slim/install.sh >/dev/null 2>&1 || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/r; cp .devrun/s30/commit.txt $OUT/r/
nvidia-smi -L | tee $OUT/r/gpu.txt
python -c "import torch, triton, hydra, liger_kernel; print(torch.__version__, triton.__version__)" 2>&1 | tee -a $OUT/r/gpu.txt
timeout 560 python -m pytest -q -p no:cacheprovider --durations=20 \
  tests/rope/test_triton_gpu.py tests/rope/test_liger.py tests/llm/test_generate_gpu.py tests/scripts/test_bench_rope.py \
  tests/rope/test_conformance.py -k "not every_head_dim" > $OUT/r/tests1.log 2>&1
echo "pytest exit $?" >> $OUT/r/tests1.log
tail -45 $OUT/r/tests1.log
