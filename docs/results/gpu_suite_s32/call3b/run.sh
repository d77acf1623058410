# Session 32, call 3b (call 3's machine, warm): the two-GPU test for rope=cutedsl, then again with
# rope.base.on_device_of made never to switch (it must fail).
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD WANDB_MODE=offline; mkdir -p $OUT/r
python -m pytest -q -p no:cacheprovider -rfE tests/rope/test_conformance.py -k "another_gpu and cutedsl" > $OUT/r/ok.log 2>&1; tail -1 $OUT/r/ok.log
sed -i 's/^    if x.is_cuda and x.get_device() != torch.cuda.current_device():$/    if False:  # BROKEN ON PURPOSE/' rope/base.py; grep -c "BROKEN ON PURPOSE" rope/base.py
python -m pytest -q -p no:cacheprovider -rfE tests/rope/test_conformance.py -k "another_gpu and cutedsl" > $OUT/r/broken_cutedsl.log 2>&1
grep -E "^E .*Error|passed|failed" $OUT/r/broken_cutedsl.log | head -5 | cut -c1-250
