"""A zoo of real programs exported in the test session: tiny Hugging Face models built from
configs (random weights, no hub access) and the torch features real programs carry (bit ops,
pt2e-style quantization, Dim.AUTO, control flow and loop operators, custom ops, one that
mutates its inputs, unbacked sizes, grad and autocast regions, complex and float8 dtypes, strict
export, user pytree types, Swin-style nested sizes)."""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed ops)
import torch.nn.functional as F
from torch import nn
from torch._higher_order_ops.associative_scan import associative_scan
from torch._higher_order_ops.map import map as hop_map
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop
from torch.export import Dim
from torch.utils import _pytree as pytree

from tests.hf_models import build_model
from tests.realzoo_ops import register_real_ops
from tests.zoo import ZooProgram, outputs_close
from tests.zoo import _run_decompositions as run_decompositions

#: modules a torch worker must import for the zoo's operator namespaces with kernels: our custom
#: op, and torch's own quantized_decomposed, which torch registers only when it is imported.
WORKER_IMPORTS: tuple[str, ...] = ("tests.realzoo_ops", "torch.ao.quantization.fx._decomposed")

VOCAB = 128
HIDDEN = 32
LAYERS = 2
HEADS = 2
FFN = 64
POSITIONS = 64
BATCH = 2
SEQ = 8
SEQ_MIN = 2
SEQ_MAX = 32
BATCH_MAX = 8


# ---------------------------------------------------------------- user pytree types


class Pair(NamedTuple):
    """A user namedtuple, as a program's input and output."""

    left: torch.Tensor
    right: torch.Tensor


@dataclass
class Box:
    """A user dataclass, as a program's input and output."""

    values: torch.Tensor
    weights: torch.Tensor


# torch serializes a user type's treespec only under a registered name; these are the names a
# user would give, and the names the service sees without ever importing this module.
pytree._register_namedtuple(Pair, serialized_type_name=f"{__name__}.Pair")
torch.export.register_dataclass(Box, serialized_type_name=f"{__name__}.Box")


# ---------------------------------------------------------------- programs


@dataclass(frozen=True)
class RealProgram(ZooProgram):
    """A zoo program plus further inputs (other sizes, for programs with dynamic shapes)."""

    more_inputs: tuple[tuple[tuple[Any, ...], dict[str, Any]], ...] = ()

    def every_input(self) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        """The example inputs first, then the further ones."""
        return [(self.args, self.kwargs), *self.more_inputs]

    def run_on(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The exported program's outputs on other inputs, leaving the program unchanged."""
        return dataclasses.replace(self, args=args, kwargs=kwargs).run()


def same_outputs(a: Any, b: Any) -> bool:
    """Equal pytree structure (the same user and ModelOutput types) and close leaves."""
    leaves_a, spec_a = pytree.tree_flatten(a)
    leaves_b, spec_b = pytree.tree_flatten(b)
    return type(a) is type(b) and spec_a == spec_b and outputs_close(leaves_a, leaves_b)


def _export(
    name: str,
    module: nn.Module,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    more: tuple[tuple[tuple[Any, ...], dict[str, Any]], ...] = (),
    **export_kwargs: Any,
) -> RealProgram:
    kwargs = kwargs or {}
    ep = torch.export.export(module, args, kwargs, strict=False, **export_kwargs)
    return RealProgram(name=name, ep=ep, args=args, kwargs=kwargs, more_inputs=more)


# ---------------------------------------------------------------- Hugging Face models


def _transformers() -> ModuleType:
    # The zoo is built from configs alone; offline mode makes any hub access fail loudly.
    os.environ["HF_HUB_OFFLINE"] = "1"
    import transformers

    return transformers


def _ids(batch: int = BATCH, seq: int = SEQ, low: int = 3) -> torch.Tensor:
    # Ids 0-2 are the configs' special tokens; BART shifts and pads with them.
    return torch.randint(low, VOCAB, (batch, seq))


def _decoder_config(config_class: Any, **extra: Any) -> Any:
    return config_class(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=1,
        intermediate_size=FFN,
        max_position_embeddings=POSITIONS,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        use_cache=False,
        **extra,
    )


def _causal_lm(name: str, config_name: str, model_name: str, **extra: Any) -> RealProgram:
    tf = _transformers()
    model = getattr(tf, model_name)(_decoder_config(getattr(tf, config_name), **extra)).eval()
    return _export(name, model, kwargs={"input_ids": _ids()})


def tiny_mixtral() -> RealProgram:
    """A tiny Mixtral (4 experts, 2 a token): its experts call
    `transformers::grouped_mm_fallback`, a custom operator namespace only importing
    `transformers.integrations.moe` registers (kept out of the zoo: a worker needs that import)."""
    return _causal_lm(
        "mixtral", "MixtralConfig", "MixtralForCausalLM", num_local_experts=4, num_experts_per_tok=2
    )


def tiny_hf_model(arch: str, layers: int = LAYERS) -> nn.Module:
    """A tiny Hugging Face model in eval mode, random weights from its config alone: "gpt2"
    (GPT2LMHeadModel), "bert" (BertModel) or "vit" (ViTModel, 16x16 images of 3 channels), as
    the benchmark builds them."""
    return build_model(arch, layers)


def _gpt2() -> RealProgram:
    return _export("gpt2", tiny_hf_model("gpt2"), kwargs={"input_ids": _ids()})


def _masked_inputs(batch: int, seq: int, **extra: torch.Tensor) -> dict[str, torch.Tensor]:
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, seq - 2 :] = 0  # padding in one row, so the mask really changes the outputs
    return {"input_ids": _ids(batch, seq), "attention_mask": mask, **extra}


def _batch_and_seq(names: list[str]) -> dict[str, dict[int, Dim]]:
    batch = Dim("batch", min=1, max=BATCH_MAX)
    seq = Dim("seq", min=SEQ_MIN, max=SEQ_MAX)
    return {name: {0: batch, 1: seq} for name in names}


def _llama_dynamic() -> RealProgram:
    tf = _transformers()
    model = tf.LlamaForCausalLM(_decoder_config(tf.LlamaConfig)).eval()
    more = ((), _masked_inputs(3, 13))
    return _export(
        "llama_dynamic",
        model,
        kwargs=_masked_inputs(BATCH, SEQ),
        more=(more,),
        dynamic_shapes=_batch_and_seq(["input_ids", "attention_mask"]),
    )


def _bert_dynamic() -> RealProgram:
    def inputs(batch: int, seq: int) -> dict[str, torch.Tensor]:
        types = torch.zeros(batch, seq, dtype=torch.long)
        types[:, seq // 2 :] = 1
        return _masked_inputs(batch, seq, token_type_ids=types)

    return _export(
        "bert_dynamic",
        tiny_hf_model("bert"),
        kwargs=inputs(BATCH, SEQ),
        more=(((), inputs(5, 3)),),
        dynamic_shapes=_batch_and_seq(["input_ids", "attention_mask", "token_type_ids"]),
    )


def _opt() -> RealProgram:
    tf = _transformers()
    config = tf.OPTConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        ffn_dim=FFN,
        max_position_embeddings=POSITIONS,
        word_embed_proj_dim=HIDDEN,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        use_cache=False,
    )
    return _export("opt", tf.OPTForCausalLM(config).eval(), kwargs={"input_ids": _ids()})


def _distilbert() -> RealProgram:
    tf = _transformers()
    config = tf.DistilBertConfig(
        vocab_size=VOCAB,
        dim=HIDDEN,
        n_layers=LAYERS,
        n_heads=HEADS,
        hidden_dim=FFN,
        max_position_embeddings=POSITIONS,
        pad_token_id=0,
    )
    model = tf.DistilBertModel(config).eval()
    return _export("distilbert", model, kwargs=_masked_inputs(BATCH, SEQ))


def _roberta() -> RealProgram:
    tf = _transformers()
    config = tf.RobertaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        # RoBERTa's positions start after the padding index.
        max_position_embeddings=POSITIONS + 2,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    return _export("roberta", tf.RobertaModel(config).eval(), kwargs={"input_ids": _ids()})


def _t5_encoder() -> RealProgram:
    tf = _transformers()
    config = tf.T5Config(
        vocab_size=VOCAB,
        d_model=HIDDEN,
        d_kv=HIDDEN // HEADS,
        d_ff=FFN,
        num_layers=LAYERS,
        num_heads=HEADS,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        use_cache=False,
    )
    model = tf.T5EncoderModel(config).eval()
    return _export("t5_encoder", model, kwargs={"input_ids": _ids()})


def _encoder_decoder_sizes() -> dict[str, int]:
    """The tiny sizes of an encoder-decoder config (BART's and Whisper's field names)."""
    return {
        "d_model": HIDDEN,
        "encoder_layers": LAYERS,
        "decoder_layers": LAYERS,
        "encoder_attention_heads": HEADS,
        "decoder_attention_heads": HEADS,
        "encoder_ffn_dim": FFN,
        "decoder_ffn_dim": FFN,
    }


def _bart() -> RealProgram:
    tf = _transformers()
    config = tf.BartConfig(
        vocab_size=VOCAB,
        **_encoder_decoder_sizes(),
        max_position_embeddings=POSITIONS,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_eos_token_id=2,
        use_cache=False,
    )
    return _export("bart", tf.BartModel(config).eval(), kwargs={"input_ids": _ids()})


def _vit() -> RealProgram:
    model = tiny_hf_model("vit")
    return _export("vit", model, kwargs={"pixel_values": torch.randn(BATCH, 3, 16, 16)})


def _bloom() -> RealProgram:
    tf = _transformers()
    config = tf.BloomConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, n_layer=LAYERS, n_head=HEADS, pad_token_id=0
    )
    config.use_cache = False
    model = tf.BloomForCausalLM(config).eval()
    return _export("bloom", model, kwargs=_masked_inputs(BATCH, SEQ))


def _deberta_v2() -> RealProgram:
    tf = _transformers()
    config = tf.DebertaV2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        max_position_embeddings=POSITIONS,
        pad_token_id=0,
        # disentangled attention: relative positions, log buckets, content-to-position terms
        relative_attention=True,
        position_buckets=8,
        max_relative_positions=16,
        pos_att_type=["p2c", "c2p"],
    )
    model = tf.DebertaV2Model(config).eval()
    return _export("deberta_v2", model, kwargs=_masked_inputs(BATCH, SEQ))


def _whisper_encoder() -> RealProgram:
    tf = _transformers()
    config = tf.WhisperConfig(
        vocab_size=VOCAB,
        **_encoder_decoder_sizes(),
        num_mel_bins=8,
        max_source_positions=16,
        max_target_positions=16,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        use_cache=False,
    )
    encoder = tf.WhisperModel(config).eval().get_encoder()
    return _export("whisper_encoder", encoder, kwargs={"input_features": torch.randn(BATCH, 8, 32)})


def _wav2vec2() -> RealProgram:
    tf = _transformers()
    config = tf.Wav2Vec2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        conv_dim=(8, 8),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=4,
        num_conv_pos_embedding_groups=2,
    )
    model = tf.Wav2Vec2Model(config).eval()
    return _export("wav2vec2", model, kwargs={"input_values": torch.randn(BATCH, 400)})


def _swin() -> RealProgram:
    tf = _transformers()
    config = tf.SwinConfig(
        image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 2], window_size=4
    )
    model = tf.SwinModel(config).eval()
    return _export("swin", model, kwargs={"pixel_values": torch.randn(BATCH, 3, 32, 32)})


# ---------------------------------------------------------------- torch features


class BitOps(nn.Module):
    """int8, uint8 and bool work: the dunder operators (`a & b`, `a >> 2`) and bitwise_*."""

    def forward(
        self, a: torch.Tensor, b: torch.Tensor, m: torch.Tensor, n: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        mixed = (a & b) | (a ^ b)
        shifted = (a >> 2) << 1
        named = torch.bitwise_and(a, b) + torch.bitwise_or(a, 3) - torch.bitwise_xor(b, a)
        by_tensor = torch.bitwise_right_shift(a, b.abs() % 3) + torch.bitwise_left_shift(a, 1)
        mask = (m & n) | ~m
        unsigned = a.to(torch.uint8) >> 1
        return mixed, shifted, named, ~a, by_tensor, mask, mask ^ n, unsigned, mask.to(torch.int8)


def _bit_ops() -> RealProgram:
    args = (
        torch.randint(-100, 100, (4, 5), dtype=torch.int8),
        torch.randint(-100, 100, (4, 5), dtype=torch.int8),
        torch.rand(4, 5) > 0.5,
        torch.rand(4, 5) > 0.5,
    )
    return _export("bit_ops", BitOps(), args)


QMIN, QMAX = -128, 127


class QuantizedNet(nn.Module):
    """What a pt2e static-quantization flow writes: int8 weights with per-channel scales as
    buffers, per-tensor quantize/dequantize pairs around activations, and a dynamically
    quantized branch (choose_qparams and the `.tensor` overloads)."""

    conv_q: torch.Tensor
    conv_scales: torch.Tensor
    conv_zero_points: torch.Tensor
    fc_q: torch.Tensor
    fc_scales: torch.Tensor
    fc_zero_points: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        conv_weight = torch.randn(4, 3, 3, 3)
        fc_weight = torch.randn(5, 4 * 6 * 6)
        self.conv_bias = nn.Parameter(torch.randn(4))
        self.fc_bias = nn.Parameter(torch.randn(5))
        for name, weight in (("conv", conv_weight), ("fc", fc_weight)):
            scales = weight.abs().flatten(1).amax(dim=1) / QMAX
            zero_points = torch.zeros(weight.shape[0], dtype=torch.int64)
            quantized = torch.ops.quantized_decomposed.quantize_per_channel(
                weight, scales, zero_points, 0, QMIN, QMAX, torch.int8
            )
            self.register_buffer(f"{name}_q", quantized)
            self.register_buffer(f"{name}_scales", scales)
            self.register_buffer(f"{name}_zero_points", zero_points)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        qd = torch.ops.quantized_decomposed
        xq = qd.quantize_per_tensor(x, 0.02, 3, 0, 255, torch.uint8)
        xd = qd.dequantize_per_tensor(xq, 0.02, 3, 0, 255, torch.uint8)
        conv_w = qd.dequantize_per_channel(
            self.conv_q, self.conv_scales, self.conv_zero_points, 0, QMIN, QMAX, torch.int8
        )
        hidden = torch.relu(torch.conv2d(xd, conv_w, self.conv_bias)).flatten(1)
        scale, zero_point = qd.choose_qparams.tensor(hidden, QMIN, QMAX, 1e-5, torch.int8)
        hq = qd.quantize_per_tensor.tensor(hidden, scale, zero_point, QMIN, QMAX, torch.int8)
        hd = qd.dequantize_per_tensor.tensor(hq, scale, zero_point, QMIN, QMAX, torch.int8)
        fc_w = qd.dequantize_per_channel(
            self.fc_q, self.fc_scales, self.fc_zero_points, 0, QMIN, QMAX, torch.int8
        )
        out = torch.nn.functional.linear(hd, fc_w, self.fc_bias)
        return out, hq


def _quantized() -> RealProgram:
    return _export("quantized", QuantizedNet().eval(), (torch.rand(2, 3, 8, 8),))


class AutoShapes(nn.Module):
    """A matmul, a softmax and a reduction over dims torch picks as dynamic itself."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = (x @ y).softmax(dim=-1)
        return scores, scores.sum(dim=0) * x.shape[0]


def _dim_hinted(name: str, hint: Any) -> RealProgram:
    args = (torch.randn(3, 4), torch.randn(4, 6))
    more = ((torch.randn(7, 5), torch.randn(5, 2)), {})
    shapes = ({0: hint, 1: hint}, {0: hint, 1: hint})
    return _export(name, AutoShapes(), args, more=(more,), dynamic_shapes=shapes)


def _dim_auto() -> RealProgram:
    return _dim_hinted("dim_auto", Dim.AUTO)


def _dim_dynamic() -> RealProgram:
    # Dim.DYNAMIC marks the example tensors themselves (a `_specialize_on` attribute), so the
    # sample-input pickle rebuilds them with torch._tensor._rebuild_from_type_v2.
    return _dim_hinted("dim_dynamic", Dim.DYNAMIC)


class CondNet(nn.Module):
    """torch.cond on a data-dependent predicate, two operands, two outputs, a dynamic batch."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(4, 6)
        self.down = nn.Linear(4, 6)

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def positive(t: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.up(t).relu(), g * 2

        def negative(t: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.down(t).sigmoid(), g - 1

        out: tuple[torch.Tensor, torch.Tensor] = torch.cond(
            gate.sum() > 0, positive, negative, (x, gate)
        )
        return out


def _cond() -> RealProgram:
    args = (torch.randn(3, 4), torch.tensor([0.5, -0.25]))
    more = ((torch.randn(5, 4), torch.tensor([-1.0, 0.25])), {})
    shapes = ({0: Dim("rows", min=2, max=16)}, None)
    return _export("cond", CondNet(), args, more=(more,), dynamic_shapes=shapes)


class WhileNet(nn.Module):
    """while_loop whose trip count is data: a counter and a carried tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.decay = nn.Parameter(torch.tensor(0.9))

    def forward(self, x: torch.Tensor, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def cond_fn(i: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
            return i < steps.sum()

        def body_fn(i: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, acc * self.decay + 1.0

        counter, total = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))
        return total, counter


def _while_loop() -> RealProgram:
    args = (torch.randn(3, 4), torch.tensor([5]))
    more = ((torch.randn(3, 4), torch.tensor([2])), {})
    return _export("while_loop", WhileNet(), args, more=(more,))


class CustomOpNet(nn.Module):
    """Calls pt2real::scaled_split with and without its optional tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, ...]:
        head, tail = torch.ops.pt2real.scaled_split(self.proj(x), bias, [2, 4], 0.25)
        plain_head, plain_tail = torch.ops.pt2real.scaled_split(x, None, [3, 3])
        return head, tail, plain_head + plain_tail


def _custom_op() -> RealProgram:
    register_real_ops()
    return _export("custom_op", CustomOpNet(), (torch.randn(3, 6), torch.randn(6)))


class NamedTupleNet(nn.Module):
    """A namedtuple in (with a nested plain tuple) and a namedtuple out."""

    def forward(self, pair: Pair, scale: torch.Tensor) -> tuple[Pair, torch.Tensor]:
        left = pair.left * scale
        return Pair(left + pair.right, left.sin()), pair.right.sum()


def _namedtuple_io() -> RealProgram:
    args = (Pair(torch.randn(2, 3), torch.randn(2, 3)), torch.randn(3))
    return _export("namedtuple_io", NamedTupleNet(), args)


class DataclassNet(nn.Module):
    """A registered dataclass in and out, next to a namedtuple."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4)

    def forward(self, box: Box, pair: Pair) -> Box:
        values = self.norm(box.values) + pair.left
        return Box(values=values, weights=box.weights.softmax(dim=-1) * pair.right)


def _dataclass_io() -> RealProgram:
    box = Box(values=torch.randn(3, 4), weights=torch.randn(3, 4))
    pair = Pair(torch.randn(3, 4), torch.randn(3, 4))
    return _export("dataclass_io", DataclassNet(), (box, pair))


class LoopsNet(nn.Module):
    """The loop operators besides while_loop: map over rows (map_impl), scan with a carry, and
    an associative scan (which export lowers to torch's predispatch vmap functions)."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.tensor(0.5))

    def forward(self, rows: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mapped = hop_map(lambda row, b: row.sin() + b, rows, bias)

        def step(carry: torch.Tensor, row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            carry = carry * self.gain + row
            return carry, carry.cos()

        last, history = scan(step, torch.zeros_like(bias), rows)
        running = associative_scan(lambda a, b: a + b, rows, dim=0, combine_mode="generic")
        return mapped, last, history, running


def _loops() -> RealProgram:
    # Tracing scan imports torch._inductor's passes, whose torch.utils.mkldnn warns on import
    # that torch.jit.script_method is deprecated: torch's own warning, not the program's.
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "`torch.jit.script_method` is deprecated", DeprecationWarning
        )
        return _export("loops", LoopsNet(), (torch.randn(5, 3), torch.randn(3)))


class UnbackedNet(nn.Module):
    """Sizes only known at run time: nonzero, masked selection, and .item() bounded by
    torch._check."""

    def forward(self, x: torch.Tensor, count: torch.Tensor) -> tuple[torch.Tensor, ...]:
        where = torch.nonzero(x > 0)
        k = count.item()
        torch._check(k >= 1)
        torch._check(k <= x.shape[0])
        return where, x[x < 0], x[:k].sum() + where.shape[0], torch.ones(k)


def _unbacked() -> RealProgram:
    args = (torch.tensor([0.5, -1.0, 2.0, -3.0, 0.0, 4.0]), torch.tensor(3))
    more = ((torch.tensor([-0.5, 1.0, -2.0, 3.0, 5.0, 6.0]), torch.tensor(5)), {})
    return _export("unbacked", UnbackedNet(), args, more=(more,))


class MutationNet(nn.Module):
    """Writes to state: a custom op mutating an input and a buffer (auto_functionalized_v2),
    BatchNorm's running statistics in train mode, and an in-place step counter."""

    count: torch.Tensor
    steps: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(4)
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, total: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        doubled = torch.ops.pt2real.accumulate(total, self.count, x)
        self.steps += 1
        return self.norm(doubled) * self.steps, total + self.count


def _mutation() -> RealProgram:
    register_real_ops()
    program = _export("mutation", MutationNet().train(), (torch.randn(3, 4), torch.randn(3, 4)))
    # the functional form run_decompositions() writes: the op inside auto_functionalized_v2
    return dataclasses.replace(program, ep=run_decompositions(program.ep))


class RegionsNet(nn.Module):
    """Grad-mode and autocast regions (wrap_with_set_grad_enabled, wrap_with_autocast)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            frozen = self.proj(x).relu()
        with torch.enable_grad():
            tracked = self.proj(x) * 2
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = self.proj(x)
        return frozen, tracked, low.float()


def _regions() -> RealProgram:
    return _export("regions", RegionsNet(), (torch.randn(2, 4),))


class DtypesNet(nn.Module):
    """complex, float8, bfloat16, half and unsigned dtypes in inputs, buffers and outputs."""

    spectrum: torch.Tensor
    w8: torch.Tensor
    w5: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("spectrum", torch.randn(4, dtype=torch.complex64))
        self.register_buffer("w8", torch.randn(4, 4).to(torch.float8_e4m3fn))
        self.register_buffer("w5", torch.randn(4).to(torch.float8_e5m2))

    def forward(
        self,
        pairs: torch.Tensor,
        z: torch.Tensor,
        f8: torch.Tensor,
        u16: torch.Tensor,
        u32: torch.Tensor,
        u64: torch.Tensor,
        bf: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        spectrum = torch.fft.fft(torch.view_as_complex(pairs)) * self.spectrum
        mixed = pairs[:, 0] @ self.w8.float() + self.w5.float() + f8.float()
        widened = u16.to(torch.int32) + u32.to(torch.int32) + u64.to(torch.int32)
        return (
            torch.view_as_real(spectrum),
            z.conj() * (1 + 2j),
            mixed.to(torch.float8_e4m3fn).to(torch.bfloat16),
            mixed.half(),
            widened,
            bf * 2,
        )


def _dtypes() -> RealProgram:
    ints = torch.tensor([1, 2, 3, 4])
    args = (
        torch.randn(4, 2),
        torch.randn(4, dtype=torch.complex128),
        torch.randn(4).to(torch.float8_e5m2),
        ints.to(torch.uint16),
        ints.to(torch.uint32),
        ints.to(torch.uint64),
        torch.randn(4, dtype=torch.bfloat16),
    )
    return _export("dtypes", DtypesNet(), args)


class Inner(nn.Module):
    """A submodule whose call signature the export preserves."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        return self.proj(x) * scale, x.sum()


class OuterNet(nn.Module):
    """Calls Inner, exported with strict=True (TorchDynamo) and Inner's signature preserved."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()
        self.head = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features, total = self.inner(x, 2.0)
        return self.head(features) + total


def _strict_preserved() -> RealProgram:
    args = (torch.randn(2, 3),)
    ep = torch.export.export(
        OuterNet(), args, strict=True, preserve_module_call_signature=("inner",)
    )
    return RealProgram(name="strict_preserved", ep=ep, args=args)


class WindowsNet(nn.Module):
    """Swin-style stages over a dynamic length: pad to a multiple of the window, attend within
    windows, trim, merge pairs, and cut both inputs to the shorter one. Each stage nests the
    last one's size, so sizes become long sympy expressions with repeated subterms and many
    two-argument Min calls, as real Swin exports write."""

    def __init__(self, stages: int = 3, window: int = 4) -> None:
        super().__init__()
        self.stages = stages
        self.window = window

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.window
        for _ in range(self.stages):
            n, width = x.shape
            x = F.pad(x, (0, 0, 0, (w - n % w) % w))
            x = x.view(-1, w, width).softmax(dim=1).reshape(-1, width)[:n]
            x = F.pad(x, (0, 0, 0, n % 2))
            x = x[0::2] + x[1::2]
            k = min(x.shape[0], y.shape[0])
            x, y = x[:k] + y[:k], y[:k] * 2
        return x, y


def _windows() -> RealProgram:
    args = (torch.randn(37, 3), torch.randn(29, 3))
    more = ((torch.randn(50, 3), torch.randn(9, 3)), {})
    shapes = ({0: Dim.AUTO}, {0: Dim.AUTO})
    return _export("windows", WindowsNet(), args, more=(more,), dynamic_shapes=shapes)


def _hf(name: str, config: str, model: str, **extra: Any) -> Callable[[], RealProgram]:
    return functools.partial(_causal_lm, name, config, model, **extra)


_BUILDERS: dict[str, Callable[[], RealProgram]] = {
    # decoder-only
    "gpt2": _gpt2,
    "llama_dynamic": _llama_dynamic,
    "mistral": _hf("mistral", "MistralConfig", "MistralForCausalLM"),
    "qwen2": _hf("qwen2", "Qwen2Config", "Qwen2ForCausalLM"),
    "gemma": _hf("gemma", "GemmaConfig", "GemmaForCausalLM", head_dim=HIDDEN // HEADS),
    "phi3": _hf("phi3", "Phi3Config", "Phi3ForCausalLM"),
    "opt": _opt,
    # encoder-only
    "bert_dynamic": _bert_dynamic,
    "distilbert": _distilbert,
    "roberta": _roberta,
    # encoder-decoder
    "t5_encoder": _t5_encoder,
    "bart": _bart,
    "deberta_v2": _deberta_v2,
    "bloom": _bloom,
    # audio
    "whisper_encoder": _whisper_encoder,
    "wav2vec2": _wav2vec2,
    # vision
    "vit": _vit,
    "swin": _swin,
    # torch features
    "bit_ops": _bit_ops,
    "quantized": _quantized,
    "dim_auto": _dim_auto,
    "dim_dynamic": _dim_dynamic,
    "cond": _cond,
    "while_loop": _while_loop,
    "custom_op": _custom_op,
    "namedtuple_io": _namedtuple_io,
    "dataclass_io": _dataclass_io,
    "loops": _loops,
    "unbacked": _unbacked,
    "mutation": _mutation,
    "regions": _regions,
    "dtypes": _dtypes,
    "strict_preserved": _strict_preserved,
    "windows": _windows,
}

REAL_PROGRAM_NAMES: tuple[str, ...] = tuple(_BUILDERS)
HF_PROGRAM_NAMES: tuple[str, ...] = REAL_PROGRAM_NAMES[: REAL_PROGRAM_NAMES.index("bit_ops")]


def build_real_program(name: str) -> RealProgram:
    """Export the real zoo program ``name`` from a fixed seed."""
    torch.manual_seed(0)
    return _BUILDERS[name]()


@functools.cache
def cached_real_zoo() -> dict[str, RealProgram]:
    """Return one process-wide build of the real zoo; callers must not mutate it."""
    return {name: build_real_program(name) for name in REAL_PROGRAM_NAMES}
