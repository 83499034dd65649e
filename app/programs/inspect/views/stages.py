"""A balanced split of the module calls into contiguous pipeline stages."""

from __future__ import annotations

from pydantic import BaseModel

from app.programs.inspect.models import Stage
from app.programs.inspect.modules import stages
from app.programs.inspect.view import InspectRequest, Subject, View, megabytes


class StagesView(BaseModel):
    """A balanced split of the top-level module calls into pipeline stages."""

    by: str
    stages: list[Stage]


def _run(subject: Subject, request: InspectRequest) -> StagesView:
    return StagesView(by=request.by, stages=stages(subject.doc, request.stages, request.by))


def _render(view: StagesView) -> str:
    return "\n".join(
        f"stage {st.index}: {', '.join(m or '<root ops>' for m in st.modules)}  "
        f"nodes={st.nodes} params={megabytes(st.param_bytes)}"
        for st in view.stages
    )


VIEW = View("stages", "module calls split into balanced pipeline stages", StagesView, _run, _render)
