#!/usr/bin/env bash
# Session 24, call 2: tracebacks of call 1's failing compile tests.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
for t in "tests/rope/test_triton_gpu.py::test_torch_compile_fullgraph[triton_v4-False]" \
         "tests/rope/test_triton_gpu.py::test_compiled_rotate_qkv_equals_eager_in_every_tiling[chunks-tail]" \
         "tests/rope/test_triton_gpu.py::test_compiled_rotate_qkv_equals_eager_in_every_tiling[interleaved]" \
         "tests/rope/test_triton_gpu.py::test_compiled_gpt_launches_the_kernel_from_inductor[triton_v4]"; do
  n=$(echo "$t" | sed 's/.*:://; s/[^A-Za-z0-9_-]/_/g')
  TORCH_LOGS=output_code timeout 120 python -m pytest -q -p no:cacheprovider --tb=short "$t" > $OUT/r/$n.log 2>&1
  echo "== $n"; grep -E "^E |Error|passed|failed" $OUT/r/$n.log | grep -v "^E  *$" | head -12
  echo "at $(( $(date +%s) - T0 )) s"
done
cd $OUT && tar czf res.tgz r && rm -rf r
