"""Structured mutations of JSON documents: value types, union arms, enum ints, names, shapes,
symbolic expressions, targets, treespecs, structure, and raw bytes.

Every mutator takes the rng and a parsed document (mutated in place) and returns a one-line
description, or None when the document has nothing it applies to. Strings that would run code
in a trusting loader create a marker file: none may ever appear.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import orjson

import schema

Json = Any
Slot = tuple[Any, Any]


@dataclass(frozen=True)
class SchemaFacts:
    """What the mutators know of the schema: every union arm and every enum-typed field."""

    arms: tuple[str, ...]
    #: enum-typed field -> the values its enum has
    enum_fields: dict[str, tuple[int, ...]]


@cache
def schema_facts() -> SchemaFacts:
    """Arms and enum fields of the current schema version, from its description."""
    latest = schema.versions()[-1].version
    described = schema.describe(schema.format_version(latest))
    types = {k: v for k, v in described.items() if isinstance(v, dict) and "kind" in v}
    enums = {
        name: tuple(sorted(v["fields"].values()))
        for name, v in types.items()
        if v["kind"] == "enum"
    }
    arms: set[str] = set()
    enum_fields: dict[str, tuple[int, ...]] = {}
    for v in types.values():
        if v["kind"] == "enum":
            continue
        for field, spec in v["fields"].items():
            if v["kind"] == "union":
                arms.add(field)
            for word in re.findall(r"\w+", spec["type"]):
                if word in enums:
                    enum_fields[field] = enums[word]
    return SchemaFacts(tuple(sorted(arms)), enum_fields)


@dataclass
class Context:
    """One mutant's randomness and the marker file its code-like payloads would create."""

    rng: random.Random
    marker: str
    #: symbols the document being mutated declares (its range constraints' keys)
    symbols: tuple[str, ...] = ()


Mutator = Callable[[Context, Json], str | None]


def slots(value: Json) -> list[Slot]:
    """Every (container, key) of a JSON value, in a deterministic order."""
    out: list[Slot] = []
    stack = [value]
    while stack:
        item = stack.pop()
        children: Any
        if isinstance(item, dict):
            children = item.items()
        elif isinstance(item, list):
            children = enumerate(item)
        else:
            continue
        for key, child in children:
            out.append((item, key))
            stack.append(child)
    return out


def _pick(ctx: Context, found: list[Slot]) -> Slot | None:
    return ctx.rng.choice(found) if found else None


def code_strings(marker: str) -> list[str]:
    """Strings that run a shell command, read files or reach Python internals if evaluated."""
    return [
        f"__import__('os').system('touch {marker}')",
        f"exec(\"open('{marker}', 'w')\")",
        f"eval(compile(\"open('{marker}', 'w')\", 'x', 'exec'))",
        "().__class__.__base__.__subclasses__()",
        f"lambda: open('{marker}', 'w')",
        f"Symbol('s0').__class__.__init__.__globals__['os'].system('touch {marker}')",
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"; touch {marker}",
        "os.system",
        "builtins.eval",
        "subprocess.Popen",
        "{{7*7}}",
        "../../../../etc/passwd",
        "/etc/passwd",
        "\x00",
        "\u202e\u0000\ud7ff",
        "A" * 5000,
    ]


_EXPR_TOKENS = (
    "s0",
    "s1",
    "s77",
    "u0",
    "x",
    "2",
    "-1",
    "0",
    "10**100",
    "+",
    "-",
    "*",
    "/",
    "//",
    "**",
    "%",
    "(",
    ")",
    ",",
    "Mod(",
    "FloorDiv(",
    "Max(",
    "Min(",
    "CeilToInt(",
    "Piecewise(",
    "Eq(",
    "Ne(",
    "<=",
    ">=",
    "==",
    "and",
    "not",
    "True",
    "oo",
    "-oo",
    "zoo",
    "nan",
    "I",
    "pi",
    "Symbol(",
    "Integer(",
    "Rational(",
    "sqrt(",
    "'",
    '"',
    ".",
    "__class__",
    "__import__",
    "lambda",
    ":",
    "[",
    "]",
    " ",
    "\n",
    ";",
    "os",
)


_FUNCTIONS = {
    "Max": 2,
    "Min": 2,
    "Mod": 2,
    "FloorDiv": 2,
    "CeilDiv": 2,
    "PythonMod": 2,
    "CleanDiv": 2,
    "Pow": 2,
    "PowByNatural": 2,
    "FloatPow": 2,
    "LShift": 2,
    "RShift": 2,
    "IntTrueDiv": 2,
    "FloatTrueDiv": 2,
    "Eq": 2,
    "Ne": 2,
    "Lt": 2,
    "Ge": 2,
    "ModularIndexing": 3,
    "Where": 3,
    "CeilToInt": 1,
    "FloorToInt": 1,
    "TruncToInt": 1,
    "ToFloat": 1,
    "Abs": 1,
    "sqrt": 1,
    "floor": 1,
    "Identity": 1,
    "OpaqueUnaryFn_exp": 1,
    "OpaqueUnaryFn_log": 1,
    "Not": 1,
    "BitwiseFn_bitwise_and": 2,
    "IsNonOverlappingAndDenseIndicator": 4,
}
_LEAVES = (
    "s0",
    "s1",
    "s77",
    "u0",
    "0",
    "1",
    "-1",
    "2",
    "64",
    "9223372036854775807",
    "9" * 40,
    "0.5",
    "1e308",
    "oo",
    "-oo",
    "int_oo",
    "zoo",
    "nan",
    "True",
    "Symbol('s0', integer=True, positive=True)",
    "Integer(0)",
    "Rational(1, 0)",
)


def grammatical(ctx: Context, depth: int = 0) -> str:
    """An expression inside the grammar torch prints (so the screen lets it through to torch),
    with the values that break arithmetic: zeros, infinities, huge integers, deep powers."""
    rng = ctx.rng
    if depth >= 3 or rng.random() < 0.35:
        if ctx.symbols and rng.random() < 0.5:
            symbol = rng.choice(ctx.symbols)
            return rng.choice([symbol, f"Symbol('{symbol}', positive=True, integer=True)"])
        return rng.choice(_LEAVES)
    if rng.random() < 0.3:
        op = rng.choice(["+", "-", "*", "/", "//", "%", "**"])
        return f"({grammatical(ctx, depth + 1)} {op} {grammatical(ctx, depth + 1)})"
    name = rng.choice(sorted(_FUNCTIONS))
    args = ", ".join(grammatical(ctx, depth + 1) for _ in range(_FUNCTIONS[name]))
    return f"{name}({args})"


def expression(ctx: Context) -> str:
    """A symbolic expression: grammatical, random tokens, a plausible formula, or code."""
    rng = ctx.rng
    roll = rng.random()
    if roll < 0.4:
        return grammatical(ctx)
    if roll < 0.6:
        return "".join(rng.choice(_EXPR_TOKENS) for _ in range(rng.randint(1, 12)))
    if roll < 0.85:
        sym = rng.choice(["s0", "s1", "s77", "u3", "s0*s1"])
        op = rng.choice(["+", "*", "//", "-", "**"])
        wrap = rng.choice(["{}", "Max(2, {})", "Mod({}, 4)", "FloorDiv({}, 2)", "-({})"])
        return wrap.format(f"{sym}{op}{rng.randint(-3, 10 ** rng.randint(1, 30))}")
    return rng.choice(code_strings(ctx.marker))


def _scalar(ctx: Context) -> Json:
    return ctx.rng.choice(
        [
            None,
            True,
            False,
            0,
            -1,
            2**31,
            2**63 - 1,
            -(2**63),
            2**64 - 1,
            1.5,
            -0.0,
            1e308,
            "",
            "x",
            "NaN",
            "Infinity",
            [],
            {},
            [1, 2],
            {"a": 1},
            [None],
            {"": None},
        ]
    )


# ---------------------------------------------------------------- generic


def retype(ctx: Context, doc: Json) -> str | None:
    """Replace a value by one of another type."""
    slot = _pick(ctx, slots(doc))
    if slot is None:
        return None
    container, key = slot
    container[key] = _scalar(ctx)
    return f"retype {key!r} -> {container[key]!r:.40}"


def delete_key(ctx: Context, doc: Json) -> str | None:
    """Remove a key from an object."""
    slot = _pick(ctx, [s for s in slots(doc) if isinstance(s[0], dict)])
    if slot is None:
        return None
    del slot[0][slot[1]]
    return f"delete {slot[1]!r}"


def add_key(ctx: Context, doc: Json) -> str | None:
    """Add an unknown key to an object."""
    found = [s[0][s[1]] for s in slots(doc) if isinstance(s[0][s[1]], dict)]
    if not found:
        return None
    target = ctx.rng.choice(found)
    key = ctx.rng.choice(["zz_unknown", "__proto__", "as_tensor", "name", "", "constructor"])
    target[key] = _scalar(ctx)
    return f"add key {key!r}"


def list_edit(ctx: Context, doc: Json) -> str | None:
    """Duplicate, drop, reverse or empty a list."""
    found = [s[0][s[1]] for s in slots(doc) if isinstance(s[0][s[1]], list) and s[0][s[1]]]
    if not found:
        return None
    target = ctx.rng.choice(found)
    how = ctx.rng.choice(["duplicate", "drop", "reverse", "empty", "multiply"])
    i = ctx.rng.randrange(len(target))
    if how == "duplicate":
        target.insert(i, orjson.loads(orjson.dumps(target[i])))
    elif how == "drop":
        del target[i]
    elif how == "reverse":
        target.reverse()
    elif how == "empty":
        target.clear()
    else:
        target.extend(orjson.loads(orjson.dumps(target)) * ctx.rng.randint(1, 20))
    return f"list {how}"


def numbers(ctx: Context, doc: Json) -> str | None:
    """An integer or float changed to an extreme."""
    found = [
        s
        for s in slots(doc)
        if isinstance(s[0][s[1]], int | float) and not isinstance(s[0][s[1]], bool)
    ]
    slot = _pick(ctx, found)
    if slot is None:
        return None
    value = ctx.rng.choice(
        [
            -1,
            0,
            2**31,
            2**53 + 1,
            2**63 - 1,
            -(2**63),
            2**64 - 1,
            1e308,
            -1e-308,
            "NaN",
            "-Infinity",
        ]
    )
    slot[0][slot[1]] = value
    return f"number {slot[1]!r} -> {value!r}"


def strings(ctx: Context, doc: Json) -> str | None:
    """A string replaced by code, a path, control characters or a long text."""
    slot = _pick(ctx, [s for s in slots(doc) if isinstance(s[0][s[1]], str)])
    if slot is None:
        return None
    value = ctx.rng.choice(code_strings(ctx.marker))
    if ctx.rng.random() < 0.05:
        value = "\u00e9" * ctx.rng.choice([70_000, 600_000])
    slot[0][slot[1]] = value
    return f"string {slot[1]!r} -> {value[:40]!r}"


# ---------------------------------------------------------------- schema-aware


def _union_slots(doc: Json) -> list[Slot]:
    arms = set(schema_facts().arms)
    return [
        s
        for s in slots(doc)
        if isinstance(s[0][s[1]], dict) and len(s[0][s[1]]) == 1 and set(s[0][s[1]]) <= arms
    ]


def union(ctx: Context, doc: Json) -> str | None:
    """A union object with two keys, an unknown or another arm, a null value, or no key."""
    slot = _pick(ctx, _union_slots(doc))
    if slot is None:
        return None
    value: dict[str, Any] = slot[0][slot[1]]
    ((arm, inner),) = value.items()
    how = ctx.rng.choice(["two-keys", "unknown-arm", "other-arm", "null", "empty", "list"])
    if how == "two-keys":
        value[ctx.rng.choice(schema_facts().arms)] = inner
    elif how == "unknown-arm":
        value[ctx.rng.choice(["as_bogus", "as_tensor_v2", "AS_TENSOR", "", "as_int "])] = value.pop(
            arm
        )
    elif how == "other-arm":
        value[ctx.rng.choice(schema_facts().arms)] = value.pop(arm)
    elif how == "null":
        value[arm] = None
    elif how == "empty":
        value.clear()
    else:
        slot[0][slot[1]] = [value]
    return f"union {arm} {how}"


def enum(ctx: Context, doc: Json) -> str | None:
    """An enum int swapped for another member, or out of range, negative, huge, another type."""
    fields = schema_facts().enum_fields
    slot = _pick(ctx, [s for s in slots(doc) if s[1] in fields])
    if slot is None:
        return None
    known = fields[slot[1]]
    value: Json
    if ctx.rng.random() < 0.5:
        value = ctx.rng.choice(known)  # another member: valid, but not what the program says
    else:
        value = ctx.rng.choice([999, -1, 2**31, 2**63 - 1, max(known) + 1, "7", 7.5, None, True])
    slot[0][slot[1]] = value
    return f"enum {slot[1]} -> {value!r}"


def _argument_names(doc: Json) -> list[Slot]:
    """`name` keys of argument objects ({"name": ...} alone, as tensors and symbols are)."""
    return [
        s
        for s in slots(doc)
        if s[1] == "name" and isinstance(s[0][s[1]], str) and isinstance(s[0], dict)
    ]


def names(ctx: Context, doc: Json) -> str | None:
    """A value name made undefined, duplicated, empty or hostile."""
    found = _argument_names(doc)
    slot = _pick(ctx, found)
    if slot is None:
        return None
    existing = [s[0][s[1]] for s in found]
    how = ctx.rng.choice(["undefined", "duplicate", "duplicate", "empty", "hostile"])
    value = {
        "undefined": f"undefined_{ctx.rng.randrange(1000)}",
        "duplicate": ctx.rng.choice(existing),
        "empty": "",
        "hostile": ctx.rng.choice(code_strings(ctx.marker)),
    }[how]
    old, slot[0][slot[1]] = slot[0][slot[1]], value
    return f"name {old!r} {how} -> {value[:30]!r}"


def nodes(ctx: Context, doc: Json) -> str | None:
    """Nodes dropped, duplicated, swapped or wired into a cycle."""
    lists = [s[0][s[1]] for s in slots(doc) if s[1] == "nodes" and isinstance(s[0][s[1]], list)]
    lists = [n for n in lists if n]
    if not lists:
        return None
    graph_nodes = ctx.rng.choice(lists)
    how = ctx.rng.choice(["drop", "duplicate", "swap", "cycle", "reverse"])
    i = ctx.rng.randrange(len(graph_nodes))
    j = ctx.rng.randrange(len(graph_nodes))
    if how == "drop":
        del graph_nodes[i]
    elif how == "duplicate":
        graph_nodes.insert(j, orjson.loads(orjson.dumps(graph_nodes[i])))
    elif how == "swap":
        graph_nodes[i], graph_nodes[j] = graph_nodes[j], graph_nodes[i]
    elif how == "reverse":
        graph_nodes.reverse()
    else:
        first, last = graph_nodes[min(i, j)], graph_nodes[max(i, j)]
        outputs = _argument_names(last.get("outputs", []) if isinstance(last, dict) else [])
        inputs = _argument_names(first.get("inputs", []) if isinstance(first, dict) else [])
        if not outputs or not inputs:
            return None
        inputs[0][0]["name"] = outputs[0][0]["name"]
    return f"nodes {how} {i} {j}"


def targets(ctx: Context, doc: Json) -> str | None:
    """A node target, or an operator argument, replaced by another operator or by Python."""
    choices = [
        "torch.ops.aten.relu.default",
        "torch.ops.aten.add.Tensor",
        "torch.ops.aten.conv2d.default",
        "torch.ops.aten.empty.memory_format",
        "torch.ops.aten.from_file.default",
        "torch.ops.aten.save.default",
        "torch.ops.aten.nonexistent.default",
        "torch.ops.aten.relu",
        "torch.ops.load_library.x.y",
        "torch.ops.higher_order.cond",
        "torch.ops.higher_order.nothing",
        "torch.ops.pt2zoo.fused_gelu.default",
        "torch.ops.evil_namespace.op.default",
        "_operator.getitem",
        "_operator.__class__",
        "torch._C._set_grad_enabled",
        "math.sqrt",
        "torch.sym_max",
        "#evil:os.system",
        "torch.ops.__builtins__.eval.default",
        "",
        *code_strings(ctx.marker)[:12],
    ]
    found = [s for s in slots(doc) if s[1] == "target" and isinstance(s[0][s[1]], str)]
    if ctx.rng.random() < 0.3:
        inputs = [s[0][s[1]] for s in slots(doc) if s[1] == "inputs" and isinstance(s[0], dict)]
        inputs = [i for i in inputs if isinstance(i, list)]
        if inputs:
            op = ctx.rng.choice(choices)
            ctx.rng.choice(inputs).append(
                {"name": "op", "arg": {"as_operator": op}, "kind": ctx.rng.choice([1, 2])}
            )
            return f"operator argument {op[:40]!r}"
    slot = _pick(ctx, found)
    if slot is None:
        return None
    slot[0][slot[1]] = ctx.rng.choice(choices)
    return f"target -> {slot[0][slot[1]][:40]!r}"


def shapes(ctx: Context, doc: Json) -> str | None:
    """Sizes, strides or storage offsets made negative, huge, symbolic, empty or very long."""
    found = [
        s
        for s in slots(doc)
        if s[1] in ("sizes", "strides", "storage_offset", "shape") and s[0][s[1]] is not None
    ]
    slot = _pick(ctx, found)
    if slot is None:
        return None
    container, key = slot
    big = ctx.rng.choice([-1, -(2**40), 0, 2**28, 2**31, 2**40, 2**62, 2**63 - 1])
    how = ctx.rng.choice(["value", "value", "symbolic", "empty", "many", "raw"])
    if key == "storage_offset" or not isinstance(container[key], list) or not container[key]:
        how = ctx.rng.choice(["value", "symbolic", "raw"])
        container[key] = {
            "value": {"as_int": big},
            "symbolic": {"as_expr": {"expr_str": expression(ctx), "hint": {"as_int": 4}}},
            "raw": big,
        }[how]
        return f"{key} {how} {big}"
    dims: list[Any] = container[key]
    i = ctx.rng.randrange(len(dims))
    if how == "value":
        dims[i] = {"as_int": big}
    elif how == "symbolic":
        hint = ctx.rng.choice([None, {"as_int": 4}, {"as_int": -4}, {"as_float": 1.5}])
        dims[i] = {"as_expr": {"expr_str": expression(ctx), "hint": hint}}
    elif how == "empty":
        dims.clear()
    elif how == "many":
        dims.extend([{"as_int": 2}] * ctx.rng.choice([8, 64, 70]))
    else:
        dims[i] = big
    return f"{key}[{i}] {how} {big}"


def expressions(ctx: Context, doc: Json) -> str | None:
    """An expression string (or a range constraint key, or a guard) replaced."""
    found = [s for s in slots(doc) if s[1] == "expr_str" and isinstance(s[0][s[1]], str)]
    roll = ctx.rng.random()
    if isinstance(doc, dict) and roll < 0.2:
        constraints = doc.setdefault("range_constraints", {})
        if isinstance(constraints, dict):
            text = expression(ctx)
            constraints[text] = {"min_val": ctx.rng.choice([0, -1, 2**63 - 1]), "max_val": 4}
            return f"range constraint {text[:40]!r}"
    if isinstance(doc, dict) and roll < 0.35:
        guards = doc.setdefault("guards_code", [])
        if isinstance(guards, list):
            source = ctx.rng.choice(["L['x'].size()[0]", "L['y'].stride()[1]", "L['x'].dim()"])
            compare = ctx.rng.choice(["==", "<=", "!=", ">"])
            text = ctx.rng.choice([expression(ctx), f"{source} {compare} {expression(ctx)}"])
            guards.append(text)
            return f"guard {text[:40]!r}"
    slot = _pick(ctx, found)
    if slot is None:
        return shapes(ctx, doc)
    slot[0][slot[1]] = expression(ctx)
    return f"expr -> {slot[0][slot[1]][:40]!r}"


def _treespec_node(ctx: Context, depth: int = 0) -> Json:
    leaf: dict[str, Json] = {"type": None, "context": None, "children_spec": []}
    kind = ctx.rng.choice(
        [
            "builtins.tuple",
            "builtins.dict",
            "collections.defaultdict",
            "collections.namedtuple",
            "collections.OrderedDict",
            "__main__.Evil",
            "os.system",
            "builtins.eval",
            None,
        ]
    )
    if kind is None or depth > 3:
        return leaf
    children = [_treespec_node(ctx, depth + 1) for _ in range(ctx.rng.randint(0, 3))]
    context: Json = ctx.rng.choice(
        [
            "null",
            orjson.dumps([f"k{i}" for i in range(len(children))]).decode(),
            orjson.dumps([{"__enum__": True, "fqn": "os:system", "name": ctx.marker}]).decode(),
            {
                "default_factory_module": ctx.rng.choice(["builtins", "os", "subprocess"]),
                "default_factory_name": ctx.rng.choice(["list", "system", "Popen", "eval"]),
                "dict_context": [],
            },
            "os.system",
            "not json",
            None,
        ]
    )
    return {"type": kind, "context": context, "children_spec": children}


def treespecs(ctx: Context, doc: Json) -> str | None:
    """A module call signature's treespec replaced: garbage, another protocol, foreign types,
    enum contexts, defaultdict factories, deep nesting."""
    found = [s for s in slots(doc) if s[1] in ("in_spec", "out_spec") and isinstance(s[0], dict)]
    slot = _pick(ctx, found)
    if slot is None:
        return None
    how = ctx.rng.choice(["garbage", "protocol", "random", "random", "deep", "mutate"])
    if how == "garbage":
        spec = ctx.rng.choice(["", "[", "null", "[1]", "{}", *code_strings(ctx.marker)[:6]])
    elif how == "protocol":
        spec = orjson.dumps([ctx.rng.choice([0, 2, -1, "1"]), _treespec_node(ctx)]).decode()
    elif how == "random":
        spec = orjson.dumps([1, _treespec_node(ctx)]).decode()
    elif how == "deep":
        depth = ctx.rng.choice([100, 900, 3000])
        node = '{"type": null, "context": null, "children_spec": []}'
        opening = '{"type": "builtins.tuple", "context": "null", "children_spec": ['
        spec = "[1, " + opening * depth + node + "]}" * depth + "]"
    else:
        parsed = parse(slot[0][slot[1]]) if isinstance(slot[0][slot[1]], str) else None
        if parsed is None:
            return None
        for mutate in (retype, delete_key, union, strings):
            if mutate(ctx, parsed) is not None:
                break
        spec = orjson.dumps(parsed).decode()
    slot[0][slot[1]] = spec
    return f"treespec {slot[1]} {how}"


def schema_version(ctx: Context, doc: Json) -> str | None:
    """The schema version: another major, a future minor, a wrong type, none."""
    if not isinstance(doc, dict):
        return None
    value = ctx.rng.choice(
        [
            {"major": 7, "minor": 0},
            {"major": 9, "minor": 0},
            {"major": 8, "minor": 999},
            {"major": 8, "minor": 0},
            {"major": -1, "minor": -1},
            {"major": 8},
            "8.20",
            None,
        ]
    )
    doc["schema_version"] = value
    return f"schema_version -> {value!r}"


def deep(ctx: Context, doc: Json) -> str | None:
    """A value replaced by deep nesting (spliced in as text: orjson stops at 255 levels)."""
    slot = _pick(ctx, slots(doc))
    if slot is None:
        return None
    slot[0][slot[1]] = DEEP_PLACEHOLDER
    return "deep nesting"


DEEP_PLACEHOLDER = "\x01deep\x01"

#: Structure-aware mutators, weighted by repetition.
MUTATORS: tuple[Mutator, ...] = (
    retype,
    retype,
    delete_key,
    add_key,
    list_edit,
    numbers,
    strings,
    union,
    union,
    union,
    enum,
    enum,
    names,
    names,
    names,
    nodes,
    nodes,
    targets,
    targets,
    shapes,
    shapes,
    shapes,
    expressions,
    expressions,
    expressions,
    treespecs,
    treespecs,
    schema_version,
    deep,
)


def mutate_value(ctx: Context, doc: Json, count: int) -> list[str]:
    """Apply `count` structure-aware mutations to `doc` in place; their descriptions."""
    if isinstance(doc, dict) and isinstance(doc.get("range_constraints"), dict):
        ctx.symbols = tuple(k for k in doc["range_constraints"] if isinstance(k, str))
    done: list[str] = []
    for _ in range(count * 4):
        if len(done) == count:
            break
        described = ctx.rng.choice(MUTATORS)(ctx, doc)
        if described is not None:
            done.append(described)
    return done


def parse(data: bytes | str) -> Json | None:
    """JSON an earlier step left mutable: None when it was cut, spliced or nested too deep to
    write back (orjson reads 1024 levels but writes 255)."""
    try:
        value = orjson.loads(data)
        orjson.dumps(value)
    except (orjson.JSONDecodeError, TypeError):
        return None
    return value


def dump(ctx: Context, doc: Json) -> bytes:
    """The document's bytes, with deep-nesting placeholders spliced in."""
    data = orjson.dumps(doc)
    placeholder = orjson.dumps(DEEP_PLACEHOLDER)
    while placeholder in data:
        depth = ctx.rng.choice([150, 199, 201, 1000, 100_000])
        opening, closing = ctx.rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
        data = data.replace(placeholder, opening * depth + b"1" + closing * depth, 1)
    return data


# ---------------------------------------------------------------- bytes


def mutate_bytes(ctx: Context, data: bytes) -> tuple[bytes, str]:
    """A text-level mutation of JSON bytes: cut, flipped, spliced, long numbers, duplicate
    keys, invalid UTF-8, a BOM, NaN literals."""
    rng = ctx.rng
    how = rng.choice(
        ["truncate", "flip", "insert", "digits", "digits", "duplicate-key", "utf8", "bom", "nan"]
    )
    at = rng.randrange(max(1, len(data)))
    if how == "truncate":
        return data[:at], f"bytes truncate {at}"
    if how == "flip":
        return data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :], how
    if how == "insert":
        junk = rng.choice([b"\x00", b",", b"]", b"}", b'"', b"\\", b"\xff", b"{" * 50])
        return data[:at] + junk + data[at:], f"bytes insert {junk[:5]!r}"
    if how == "digits":
        found = list(re.finditer(rb"(?<=[:\[,])-?[0-9]+", data))
        if not found:
            return data, "no digits"
        match = rng.choice(found)
        digits = rng.choice([b"9" * 20, b"1" * 400, b"1" * 5000, b"1e999", b"-0", b"1" + b"0" * 30])
        return data[: match.start()] + digits + data[match.end() :], f"digits {len(digits)}"
    if how == "duplicate-key":
        found = list(re.finditer(rb'"([a-z_]+)":', data))
        if not found:
            return data, "no keys"
        match = rng.choice(found)
        value = rng.choice([b"null", b"1", b'"x"', b"{}", b"[]"])
        return data[: match.start()] + match.group(0) + value + b"," + data[match.start() :], (
            f"duplicate key {match.group(1).decode()}"
        )
    if how == "utf8":
        starts = [m.start() + 1 for m in re.finditer(rb'"[a-z]', data)]
        if not starts:
            return data, "no strings"
        spot = rng.choice(starts)
        bad = rng.choice([b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\\ud800", b"\\u0000"])
        return data[:spot] + bad + data[spot:], f"utf8 {bad!r}"
    if how == "bom":
        return b"\xef\xbb\xbf" + data, how
    found = list(re.finditer(rb"(?<=:)-?[0-9]+(?:\.[0-9]+)?", data))
    if not found:
        return data, "no numbers"
    match = rng.choice(found)
    literal = rng.choice([b"NaN", b"Infinity", b"-Infinity", b"nan", b"1e400"])
    return data[: match.start()] + literal + data[match.end() :], f"literal {literal.decode()}"
