"""The module tree ``torch.export.unflatten`` rebuilds, with calls, nodes and weights."""

from __future__ import annotations

from app.programs.inspect.models import ModuleTree
from app.programs.inspect.modules import module_tree
from app.programs.inspect.view import InspectRequest, Subject, View, megabytes


def _run(subject: Subject, request: InspectRequest) -> ModuleTree:
    return module_tree(subject.doc, subject.weights)


def _render(tree: ModuleTree) -> str:
    lines = ["module  type  calls  call nodes own/with submodules  parameters with them"]
    for m in tree.modules:
        params = m.total_parameters
        lines.append(
            f"{'  ' * m.depth}{m.path or '<root>'}  {m.type or ''}  "
            f"calls={m.calls} nodes={m.nodes}/{m.total_nodes} "
            f"params={params.numel} ({megabytes(params.nbytes)})"
        )
    return "\n".join(lines)


VIEW = View(
    "modules", "the module hierarchy with calls, nodes and weights", ModuleTree, _run, _render
)
