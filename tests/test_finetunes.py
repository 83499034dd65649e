"""The fine-tune series (tests/finetunes.py) is what the storage tests and the bench take it for:
full fine-tunes of one base, every tensor changed, same names, dtypes and shapes, each having
learned its task, as torch loads them from their archives."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.finetunes import DTYPES, SMALL, TUNES, Series, loss, series, tokens


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Series]:
    return series(SMALL, tmp_path_factory.mktemp("finetunes"))


def _state(archive: Path) -> dict[str, torch.Tensor]:
    return dict(torch.export.load(archive).state_dict)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_tensor_of_every_fine_tune_differs_from_the_base(
    small: dict[str, Series], dtype: str
) -> None:
    archives = small[dtype].archives
    assert len(archives) == TUNES + 1
    base, *tunes = (_state(archive) for archive in archives)
    # every parameter of the GPT-2 (its tied head once more under its own name)
    assert "transformer.h.1.mlp.c_proj.weight" in base
    assert "transformer.ln_f.bias" in base
    assert len(base) == 4 + 12 * SMALL.layers + 1
    assert {t.dtype for t in base.values()} == {DTYPES[dtype]}
    for tune in tunes:
        assert tune.keys() == base.keys()
        for name, tensor in tune.items():
            assert (tensor.dtype, tensor.shape) == (base[name].dtype, base[name].shape), name
            assert not torch.equal(tensor, base[name]), name
    # each fine-tune learned a task of its own: no two are alike
    weight = "transformer.h.0.attn.c_attn.weight"
    assert len({tune[weight].float().sum().item() for tune in tunes}) == TUNES


def test_the_bf16_series_is_the_fp32_series_cast(small: dict[str, Series]) -> None:
    for wide, narrow in zip(small["fp32"].archives, small["bf16"].archives, strict=True):
        cast = {name: t.to(torch.bfloat16) for name, t in _state(wide).items()}
        torch.testing.assert_close(_state(narrow), cast, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_each_loaded_fine_tune_fits_its_task_better_than_the_base(
    small: dict[str, Series], dtype: str
) -> None:
    base, *tunes = (torch.export.load(archive).module() for archive in small[dtype].archives)
    for task, tune in enumerate(tunes, start=1):
        ids = tokens(SMALL, task)
        tuned, before = loss(tune(ids), ids).item(), loss(base(ids), ids).item()
        assert tuned < before - 0.05, (task, tuned, before)
        # and on another task's batch it learned nothing of the kind
        other = tokens(SMALL, task % TUNES + 1)
        assert loss(tune(other), other).item() > tuned
