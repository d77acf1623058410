[ -d /tmp/site/liger_kernel ] || bash .whl_slim/install.sh >/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
echo "=== GPU tests of the touched modules (one GPU: the two-GPU test skips)"
timeout 330 python -m pytest -q -p no:cacheprovider tests/rope/test_triton_gpu.py tests/rope/test_liger.py tests/rope/test_conformance.py -k "not every_head_dim and not gpt_compiles" 2>&1 | tail -4
echo "=== bench_rope overhead and two head dims, --device cuda:0"
timeout 200 python -m scripts.bench_rope --overhead --head-dims --head-dim-list 54,130 --elements 32M --variant full --ropes triton_v4 --no-compiled --device cuda:0 --out $OUT/post0 2>&1 | grep -E "copy bandwidth|head_dim|Error|error|wrote" | head
echo "=== bench_rope --device cuda:1 on one GPU"
python -m scripts.bench_rope --head-dims --device cuda:1 2>&1 | tail -2
