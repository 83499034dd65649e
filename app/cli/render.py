"""A person's reading of each inspect view (the JSON has everything)."""

from __future__ import annotations

from typing import Any


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.2f} MB"


def render_view(view: str, data: dict[str, Any]) -> str:
    """The text of one inspection view's result."""
    return "\n".join(_RENDERERS[view](data))


def _modules(data: dict[str, Any]) -> list[str]:
    lines = ["module  type  calls  call nodes own/with submodules  parameters with them"]
    for m in data["modules"]:
        params = m["total_parameters"]
        lines.append(
            f"{'  ' * m['depth']}{m['path'] or '<root>'}  {m['type'] or ''}  "
            f"calls={m['calls']} nodes={m['nodes']}/{m['total_nodes']} "
            f"params={params['numel']} ({_mb(params['nbytes'])})"
        )
    return lines


def _module_graph(data: dict[str, Any]) -> list[str]:
    lines = [f"depth {data['depth']}: {len(data['vertices'])} vertices, chain={data['is_chain']}"]
    lines += [
        f"  {v['id']}  {v['type'] or v['kind']}  nodes={v['nodes']} params={_mb(v['param_bytes'])}"
        for v in data["vertices"]
        if v["kind"] in ("module", "ops")
    ]
    lines += [
        f"  {e['source']} -> {e['target']}  ({len(e['values'])} values)" for e in data["edges"]
    ]
    return lines


def _stages(data: dict[str, Any]) -> list[str]:
    return [
        f"stage {st['index']}: {', '.join(m or '<root ops>' for m in st['modules'])}  "
        f"nodes={st['nodes']} "
        f"params={_mb(st['param_bytes'])}"
        for st in data["stages"]
    ]


def _partitions(data: dict[str, Any]) -> list[str]:
    lines = [f"{len(data['partitions'])} partitions for {', '.join(data['supported'])}"]
    for i, part in enumerate(data["partitions"]):
        lines.append(f"  #{i}: {len(part['nodes'])} nodes: {', '.join(part['nodes'][:8])}")
    return lines


def _operators(data: dict[str, Any]) -> list[str]:
    total, main = data["total"], data["graph"]["nodes"]
    nested = f", {total['nodes']} with its subgraphs" if total["nodes"] != main else ""
    lines = [
        f"{main} call nodes in the graph{nested} ({data['nodes_with_io']} with placeholders, "
        "get_attrs and the output, as torch counts them)"
    ]
    ranked = sorted(total["by_target"].items(), key=lambda kv: -kv[1])
    lines += [f"  {count:6}  {target}" for target, count in ranked]
    if data["custom_namespaces"]:
        lines.append(f"register first: {', '.join(data['custom_namespaces'])}")
    return lines


def _weights(data: dict[str, Any]) -> list[str]:
    lines = [f"{data['total']['count']} tensors, {_mb(data['total']['nbytes'])}"]
    for label in ("by_kind", "by_dtype"):
        for key, tally in data[label].items():
            lines.append(f"  {key:12} {tally['count']:5}  {_mb(tally['nbytes'])}")
    lines += [_quant_line(q) for q in data["quantized"]]
    return lines


def _quant_line(q: dict[str, Any]) -> str:
    """One quantize or dequantize node's parameters as text."""

    def ref(value: dict[str, Any]) -> str:
        return f"{value['value']} (weight {value['weight']})" if value["weight"] else value["value"]

    fields = [
        f"{key}={q[key]}"
        for key in ("scale", "zero_point", "axis", "group_size", "block_size", "dtype", "out_dtype")
        if q[key] is not None
    ]
    if q["quant_min"] is not None or q["quant_max"] is not None:
        fields.append(f"range=[{q['quant_min']}, {q['quant_max']}]")
    if q["symmetric"] is not None:
        fields.append("symmetric" if q["symmetric"] else "asymmetric")
    fields += [f"{key}={ref(value)}" for key, value in q["tensors"].items()]
    return f"  {q['op']} {q['scheme']} {q['node']} of {ref(q['input'])}: {', '.join(fields)}"


_RENDERERS = {
    "modules": _modules,
    "module-graph": _module_graph,
    "stages": _stages,
    "partitions": _partitions,
    "operators": _operators,
    "weights": _weights,
}
