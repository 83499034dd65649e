"""The inspect views by name, found in the modules of `app.programs.inspect.views`.

Everything that lists views derives from here: the API's `view` parameter and its typed
answers (`InspectAnswer`, one model per view, told apart by ``view``), the command line's
``--view`` choices and its text.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from app.programs.inspect import views as _package
from app.programs.inspect.view import InspectRequest, Subject, View


@cache
def views() -> dict[str, View[Any]]:
    """Every view, by name (modules of the package in name order)."""
    found: dict[str, View[Any]] = {}
    for module in pkgutil.iter_modules(_package.__path__):
        view = importlib.import_module(f"{_package.__name__}.{module.name}").VIEW
        if not isinstance(view, View) or view.name in found:
            raise TypeError(f"{module.name}: VIEW must be a View with a name of its own")
        found[view.name] = view
    return found


def run(request: InspectRequest, subject: Subject) -> BaseModel:
    """The view the request names, of the subject."""
    result: BaseModel = views()[request.view].run(subject, request)
    return result


def render(name: str, result: BaseModel) -> str:
    """A person's reading of a view's result (the JSON has everything)."""
    return views()[name].render(result)


@cache
def _answer_model(name: str) -> type[BaseModel]:
    """The view's result with ``view`` first: ``{"view": name, ...the result's fields}``."""
    result = views()[name].result
    fields: dict[str, Any] = {key: (f.annotation, f) for key, f in result.model_fields.items()}
    title = "".join(part.title() for part in name.split("-"))
    tag: Any = Literal[name]
    model: type[BaseModel] = create_model(
        f"Inspect{title}",
        __config__=ConfigDict(extra="forbid"),
        __doc__=f"The {name} view: {views()[name].help}.",
        view=(tag, name),
        **fields,
    )
    return model


def answer(name: str, result: BaseModel) -> BaseModel:
    """The API's and the CLI's answer: the result tagged with its view's name."""
    return _answer_model(name).model_construct(view=name, **dict(result))


if TYPE_CHECKING:
    ViewName = str
    InspectAnswer = BaseModel
else:
    #: The views' names, as a type (the API's `view` query parameter).
    ViewName = Literal[tuple(views())]
    #: Any view's answer, told apart by ``view``.
    InspectAnswer = Annotated[
        Union[tuple(_answer_model(name) for name in views())],  # noqa: UP007
        Field(discriminator="view"),
    ]
