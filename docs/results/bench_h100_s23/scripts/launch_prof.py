# ruff: noqa
"""Session 23: why triton_v4's launch in a compiled graph costs ~15 us more host time than Inductor's rotation
kernel (launch_host.py): cProfile of the compiled functions of 12 rotations (GPU asleep), torch against triton_v4,
and what Inductor's launcher of rope_kernel_static is (static or Triton's, its metadata)."""
import cProfile, io, pstats, time, gc
import torch
import rope
from llm.model import export_to_compile_workers

torch._inductor.config.static_launch_user_defined_triton_kernels = True
export_to_compile_workers({"static_launch_user_defined_triton_kernels": True})
B, T, H, D, L = 24, 512, 8, 48, 12
dev = "cuda"
qkvs = [torch.randn(B, T, 3 * H * D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(L)]
fns = {}
for n in ("torch", "triton_v4"):
    r = rope.build(n, D, T).to(dev)
    def f(qkvs, r=r):
        return [r.rotate_qkv(x, H, H)[:2] for x in qkvs]
    fns[n] = torch.compile(f)
    for _ in range(3):
        fns[n](qkvs)
torch.cuda.synchronize()
# Inductor's launchers of the user kernel
for obj in gc.get_objects():
    try:
        if type(obj).__name__ in ("CachingAutotuner", "StaticTritonCompileResult") and "rope" in str(getattr(obj, "fn", "")):
            print("autotuner", type(obj).__name__, obj.fn, [type(l).__name__ for l in getattr(obj, "launchers", [])],
                  getattr(obj, "inductor_meta", {}).get("grid_type"))
            for l in getattr(obj, "launchers", []):
                print("  launcher", l, getattr(l, "__dict__", {}).keys())
                for attr in ("config", "n_regs", "n_spills", "shared", "store_cubin"):
                    print("   ", attr, getattr(l, attr, None))
                kern = getattr(l, "kernel", None) or getattr(l, "bin", None)
                print("    kernel", type(kern).__name__, getattr(kern, "metadata", None) and {k: getattr(kern.metadata, k, None) for k in ("global_scratch_size", "profile_scratch_size", "shared", "num_warps", "launch_cooperative_grid", "launch_pdl")})
    except Exception as e:
        pass
for n, f in fns.items():
    pr = cProfile.Profile()
    for _ in range(200):
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)
        pr.enable(); out = f(qkvs); pr.disable()
        del out
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s).sort_stats("tottime")
    st.print_stats(25)
    print(f"==== cProfile, {n}: 200 calls of 12 rotations ====")
    print(s.getvalue())
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(30)
    print(f"==== by cumulative, {n} ====")
    print(s.getvalue())
