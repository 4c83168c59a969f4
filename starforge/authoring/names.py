"""Top-level module names: which a package root provides, and which a plugin must not claim.

Light on purpose (no :mod:`ast`, no :mod:`tokenize`): ``forge lock`` derives a version's
top-level names from its verified tree and refuses the shadowing ones, without loading the
static checks of :mod:`starforge.authoring.checks`.

Laptop side.
"""

from __future__ import annotations

import re

from .stdlib_names import STDLIB_NAMES

# Import names of the training stack a job already has: a plugin module with one of these
# names would replace the framework it means to patch.
TRAINING_STACK = frozenset({
    "accelerate", "apex", "bitsandbytes", "datasets", "deepspeed", "einops", "flash_attn",
    "flax", "huggingface_hub", "hydra", "jax", "jaxlib", "keras", "liger_kernel",
    "megatron", "nemo", "nemo_aligner", "nemo_rl", "numpy", "omegaconf", "openrlhf", "optax",
    "pandas", "peft", "ray", "safetensors", "scipy", "sentencepiece", "sglang", "tensorboard",
    "tensordict", "tensorflow", "tiktoken", "tokenizers", "torch", "torchaudio", "torchdata",
    "torchvision", "transformer_engine", "transformers", "triton", "trl", "verl", "vllm",
    "wandb", "xformers",
})

# Names StarForge itself needs on the cluster: the runtime, the plugin tree, its one
# dependency, and the start-up hooks the job's bootstrap relies on.
RESERVED_NAMES = {
    "starforge": "the StarForge runtime itself",
    "forge_plugins": "the directory the job stages plugins in",
    "packaging": "the one dependency of StarForge's cluster-side runtime",
    "sitecustomize": "the start-up hook that carries plugins into every process of the job",
    "usercustomize": "a start-up hook Python runs in every process",
}

_EXTENSION_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\.[A-Za-z0-9_-]+)*\.(so|pyd)$")


def top_level_names(files: list[str]) -> tuple[str, ...]:
    """Every name importable from the package root, sorted.

    ``x.py``, an extension module ``x.*.so`` / ``x.pyd``, and any directory ``x/`` (a
    package, or a namespace package when it has no ``__init__.py``).

    >>> top_level_names(["plugin.yaml", "opsd_patch.py", "helpers/util.py", "docs-src/a.md"])
    ('helpers', 'opsd_patch')
    """
    return tuple(sorted(_top_level_origins(files)))


def _top_level_origins(files: list[str]) -> dict[str, str]:
    """``{name: the file or directory providing it}`` (``types.py``, ``ray/``)."""
    out: dict[str, str] = {}
    for rel in files:
        head, sep, _ = rel.partition("/")
        if sep:
            if head.isidentifier():
                out.setdefault(head, head + "/")
            continue
        if head.endswith(".py") and head[:-3].isidentifier():
            out.setdefault(head[:-3], head)
            continue
        m = _EXTENSION_RE.match(head)
        if m:
            out.setdefault(m.group(1), head)
    return out



def shadowing_reason(name: str) -> str | None:
    """Why a plugin must not provide the top-level module *name* (a reserved, standard-library
    or training-stack name), or None.

    >>> shadowing_reason("json")
    'it shadows the standard-library module of that name'
    """
    if name in RESERVED_NAMES:
        return f"it is reserved: {RESERVED_NAMES[name]}"
    if name in STDLIB_NAMES:
        return "it shadows the standard-library module of that name"
    if name in TRAINING_STACK:
        return f"it shadows the training-stack package '{name}'"
    return None
