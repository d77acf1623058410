"""pytest plugin: Inductor launches rope_kernel with Triton's own launcher (no static launcher)."""
import rope.triton_rope as t
t._TritonRotary.inductor_options = {}
