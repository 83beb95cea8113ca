"""RLMesh's adapters v1 in pure Python (placeholder: the public surface lands with issue 21's
resolver; this branch brings only the numeric kernels, in private modules)."""

__all__: list[str] = []
