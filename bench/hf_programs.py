"""Real programs for the benchmark: Hugging Face models built from configs, sized to 1-2k nodes.

Real exports carry more metadata per node than the stacked decoder blocks (longer module
stacks, stack traces, more value types), so parse and dump cost more per node there; each
model (tests/hf_models.py) is a small-width config with enough layers for about 1k top-level
nodes. The archives are cached next to the decoder programs, keyed by torch version and
`HF_VERSION`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from bench.programs import Cache, Program, _document, _save, _size, node_count
from tests.hf_models import MODELS, HFModel, transformers_module

#: Bump when the models or their sizes change, so stale archives are not reused.
HF_VERSION = 1


def hf_program(cache: Cache, model: HFModel) -> Program:
    """The cached export of one model (exported with its example inputs on a cache miss)."""

    def make(target: Path) -> None:
        torch.manual_seed(0)
        module = model.build(transformers_module(), model.layers).eval()
        args, kwargs = model.inputs()
        _save(torch.export.export(module, args, kwargs, strict=False), target)

    path = cache.archive(f"hf{HF_VERSION}-{model.name}{model.layers}", make)
    model.register()
    document = _document(path)
    nodes = node_count(document)
    return Program(
        f"{model.name}-{_size(nodes)}",
        f"Hugging Face {model.name}, {model.layers} layers, torch.export",
        nodes,
        document,
        path,
        model.inputs,
        model.register,
    )


def hf_programs(cache: Cache) -> list[Program]:
    """Every model of `MODELS`."""
    return [hf_program(cache, model) for model in MODELS]
