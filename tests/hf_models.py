"""Hugging Face models built from configs with random weights (no hub access: offline mode makes
any download fail): the families of the real zoo (tests/realzoo.py), each with inputs to run it,
sized by the bench (bench/hf_programs.py) to about 1k top-level nodes."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

VOCAB = 128
HIDDEN = 32
HEADS = 2
FFN = 64
POSITIONS = 64
BATCH = 2
SEQ = 8

Inputs = tuple[tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class HFModel:
    """One model family: how to build it with `layers` layers, and inputs to run it."""

    name: str
    layers: int
    build: Callable[[Any, int], nn.Module]
    inputs: Callable[[], Inputs]
    #: the transformers class; importing it registers its output types as pytree nodes, which
    #: torch.export.load needs.
    model_class: str

    def register(self) -> None:
        """Import the model's module (and so its output types), as loading the archive needs."""
        getattr(transformers_module(), self.model_class)


def transformers_module() -> Any:
    """The transformers package, imported in offline mode (a download fails rather than waits)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import transformers

    return transformers


def _ids() -> Inputs:
    generator = torch.Generator().manual_seed(1)
    return (), {"input_ids": torch.randint(3, VOCAB, (BATCH, SEQ), generator=generator)}


def _ids_and_mask() -> Inputs:
    _, kwargs = _ids()
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[0, SEQ - 2 :] = 0
    return (), {**kwargs, "attention_mask": mask}


def _pixels() -> Inputs:
    generator = torch.Generator().manual_seed(1)
    return (), {"pixel_values": torch.randn(BATCH, 3, 16, 16, generator=generator)}


def _gpt2(tf: Any, layers: int) -> nn.Module:
    config = tf.GPT2Config(
        vocab_size=VOCAB,
        n_embd=HIDDEN,
        n_layer=layers,
        n_head=HEADS,
        n_inner=FFN,
        n_positions=POSITIONS,
        bos_token_id=1,
        eos_token_id=2,
        use_cache=False,
    )
    model: nn.Module = tf.GPT2LMHeadModel(config)
    return model


def _llama(tf: Any, layers: int) -> nn.Module:
    config = tf.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        num_key_value_heads=1,
        intermediate_size=FFN,
        max_position_embeddings=POSITIONS,
        pad_token_id=0,
        use_cache=False,
    )
    model: nn.Module = tf.LlamaForCausalLM(config)
    return model


def _bert(tf: Any, layers: int) -> nn.Module:
    config = tf.BertConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        max_position_embeddings=POSITIONS,
    )
    model: nn.Module = tf.BertModel(config)
    return model


def _t5_encoder(tf: Any, layers: int) -> nn.Module:
    config = tf.T5Config(
        vocab_size=VOCAB,
        d_model=HIDDEN,
        d_kv=HIDDEN // HEADS,
        d_ff=FFN,
        num_layers=layers,
        num_heads=HEADS,
        use_cache=False,
    )
    model: nn.Module = tf.T5EncoderModel(config)
    return model


def _vit(tf: Any, layers: int) -> nn.Module:
    config = tf.ViTConfig(
        hidden_size=HIDDEN,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        image_size=16,
        patch_size=8,
        num_channels=3,
    )
    model: nn.Module = tf.ViTModel(config)
    return model


#: Layer counts chosen for about 1k top-level nodes each (1-2 MB of JSON).
MODELS = (
    HFModel("gpt2", 26, _gpt2, _ids, "GPT2LMHeadModel"),
    HFModel("llama", 16, _llama, _ids, "LlamaForCausalLM"),
    HFModel("bert", 42, _bert, _ids_and_mask, "BertModel"),
    HFModel("t5-encoder", 24, _t5_encoder, _ids, "T5EncoderModel"),
    HFModel("vit", 42, _vit, _pixels, "ViTModel"),
)


def build_model(name: str, layers: int) -> nn.Module:
    """The family `name` of `MODELS` with `layers` layers, random weights, in eval mode."""
    for model in MODELS:
        if model.name == name:
            return model.build(transformers_module(), layers).eval()
    raise ValueError(f"no Hugging Face model {name!r}")
