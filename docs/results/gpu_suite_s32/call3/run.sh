# Session 32, call 3 (two GPUs, the machine of the three staging calls before it, which carried .whl and the
# CuTeDSL wheels, the 92 MB cu13 libraries in three parts, into /tmp/cw): CuTeDSL's GPU tests, and the
# conformance grid and the two-GPU test for rope=cutedsl.
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline  # the wheel's .pth, which PYTHONPATH does not read
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
cd /tmp/cw && cat cu13.part00 cu13.part01 cu13.part02 > nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl \
  && md5sum nvidia_cutlass_dsl_libs_cu13-*.whl | tee $R/md5.txt && cd - >/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/cw/*.whl 2>&1 | tail -2
python -c "import cutlass, cutlass.cute; print('cutlass', cutlass.__version__ if hasattr(cutlass, '__version__') else '?')" 2>&1 | tail -1
timeout 300 python -m pytest -q -p no:cacheprovider -n 12 --timeout 280 -rfE tests/rope/test_cutedsl_gpu.py tests/rope/test_cutedsl.py \
  > $R/cutedsl.log 2>&1; echo "pytest exit $?" >> $R/cutedsl.log; tail -3 $R/cutedsl.log
timeout 200 python -m pytest -q -p no:cacheprovider -n 12 --timeout 180 -rfE tests/rope/test_conformance.py -k cutedsl \
  > $R/conformance.log 2>&1; echo "pytest exit $?" >> $R/conformance.log; tail -3 $R/conformance.log
