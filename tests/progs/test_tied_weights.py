"""Tied weights (one storage under two names) survive every route and are counted once.

torch is the reference: torch.export.save stores a tied weight once, torch.export.load gives the
two names one storage (equal data_ptr), and ``sum(p.numel() for p in module.parameters())``
counts a tied parameter once.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from app import operations as ops
from app.programs.inspect.models import ModuleTree, WeightStats
from app.programs.inspect.view import InspectRequest
from app.registry.summary import summarize
from app.settings import Settings
from app.tensors.safetensors_io import ALIASES_KEY, METADATA_KEY, _split, from_safetensors
from tests.progs.test_round_trip_digest import digests, ours_pt2, ours_safetensors
from tests.zoo import archive_bytes

SETTINGS = Settings()
VOCAB, WIDTH = 512, 64


class TiedLM(nn.Module):
    """An embedding and an LM head sharing one weight (tie_word_embeddings), and an untied block."""

    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, WIDTH)
        self.block = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU())
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.lm_head.weight = self.embed_tokens.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.lm_head(self.block(self.embed_tokens(ids)))
        return out


@pytest.fixture(scope="module")
def tied() -> tuple[TiedLM, torch.Tensor, bytes]:
    torch.manual_seed(0)
    module = TiedLM()
    ids = torch.randint(0, VOCAB, (2, 7))
    return module, ids, archive_bytes(torch.export.export(module, (ids,), strict=False))


def stored_bytes(archive: bytes) -> int:
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        return sum(
            i.file_size
            for i in z.infolist()
            if "/data/weights/" in i.filename and not i.filename.endswith(".json")
        )


def test_torch_stores_a_tie_once(tied: tuple[TiedLM, torch.Tensor, bytes]) -> None:
    module, _, archive = tied
    unique = sum(p.numel() for p in module.parameters()) * 4
    assert stored_bytes(archive) == unique
    with ops.open_source(archive, "zip", SETTINGS) as source:
        assert ops.tied_weights(source) == {"lm_head.weight": "embed_tokens.weight"}


def test_safetensors_stores_a_tie_once_and_names_it(
    tied: tuple[TiedLM, torch.Tensor, bytes],
) -> None:
    module, _, archive = tied
    with ops.open_source(archive, "zip", SETTINGS) as source:
        weights = ops.weights_safetensors(source)
    header, _ = _split(weights)
    assert "lm_head.weight" not in header
    assert header[METADATA_KEY][ALIASES_KEY] == '{"lm_head.weight":"embed_tokens.weight"}'
    unique = sum(p.numel() for p in module.parameters()) * 4
    assert unique <= len(weights) < unique + 4096
    tensors = from_safetensors(weights)
    assert tensors["lm_head.weight"].data is tensors["embed_tokens.weight"].data
    assert tensors["lm_head.weight"].kind == "parameter"
    assert tensors["lm_head.weight"].meta.requires_grad


@pytest.mark.parametrize("route", [ours_safetensors, ours_pt2])
def test_deserialize_keeps_the_tie(
    tied: tuple[TiedLM, torch.Tensor, bytes], route: object, tmp_path: Path
) -> None:
    module, ids, archive = tied
    assert callable(route)
    again: bytes = route(archive, tmp_path)
    assert stored_bytes(again) == stored_bytes(archive)
    assert len(again) < len(archive) + 4096
    loaded = torch.export.load(io.BytesIO(again))
    state = loaded.state_dict
    assert state["lm_head.weight"].data_ptr() == state["embed_tokens.weight"].data_ptr()
    assert torch.equal(loaded.module()(ids), module(ids))
    assert digests(again) == digests(archive)


def test_counts_are_of_unique_storage(tied: tuple[TiedLM, torch.Tensor, bytes]) -> None:
    module, _, archive = tied
    unique = sum(p.numel() for p in module.parameters())
    named = sum(t.numel() for t in module.state_dict().values())
    assert named == unique + VOCAB * WIDTH
    with ops.open_source(archive, "zip", SETTINGS) as source:
        doc = ops.read_document(source, None, SETTINGS).doc
        summary = summarize(doc, ops.tied_weights(source))
        modules = ops.inspect(source, SETTINGS, InspectRequest(view="modules"))
        weights = ops.inspect(source, SETTINGS, InspectRequest(view="weights"))
    assert (summary.parameter_count, summary.parameters, summary.tied_parameters) == (unique, 4, 1)
    assert summarize(doc).parameter_count == named
    assert isinstance(modules, ModuleTree)
    assert isinstance(weights, WeightStats)
    root = modules.module("")
    assert root.total_parameters.numel == unique
    assert root.total_parameters.nbytes == unique * 4
    # each module still shows its own weight
    assert modules.module("lm_head").total_parameters.numel == VOCAB * WIDTH
    assert weights.by_kind["parameter"].numel == unique
    assert weights.total_with_ties.numel == named
