"""Building blocks of the wire models: field metadata, structs, union arms, wire floats."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, GetCoreSchemaHandler
from pydantic_core import core_schema

Version = tuple[int, int]

#: The first version of each major that torch shipped; history before it is not described.
FIRST_8X: Version = (8, 2)
#: The oldest schema version a torch release wrote into schema.yaml (torch 2.3).
FIRST_KNOWN: Version = (5, 1)


@dataclass(frozen=True, slots=True)
class Wire:
    """Metadata of one wire field or union arm: torch's field id and its life span."""

    id: int
    since: Version = FIRST_KNOWN
    until: Version | None = None

    def alive(self, version: Version) -> bool:
        """Whether the field exists in documents of `version`."""
        return self.since <= version and (self.until is None or version < self.until)


def _nonfinite(value: str) -> float:
    return {"Infinity": math.inf, "-Infinity": -math.inf}.get(value, math.nan)


@dataclass(frozen=True, slots=True)
class WireName:
    """Names a wire scalar whose Python annotation is not the plain type (see WireFloat)."""

    name: str


#: torch writes non-finite floats as these strings; they parse to float and dump back to them.
WireFloat = Annotated[
    float | Annotated[Literal["Infinity", "-Infinity", "NaN"], AfterValidator(_nonfinite)],
    WireName("float"),
]


class _Model(BaseModel):
    """Common config: strict types, torch's float strings, keep unknown keys."""

    model_config = ConfigDict(
        strict=True,
        extra="allow",
        ser_json_inf_nan="strings",
        validate_default=False,
        revalidate_instances="never",
    )

    __since__: ClassVar[Version] = FIRST_KNOWN
    __until__: ClassVar[Version | None] = None


class Struct(_Model):
    """A torch schema struct: every declared field is written, unknown keys are kept."""

    #: The fields that have a default, which a document may omit.
    __defaulted__: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.__defaulted__ = frozenset(
            name for name, info in cls.model_fields.items() if not info.is_required()
        )


class Arm(_Model):
    """One arm of a torch union: a model whose single field is the arm's key."""

    model_config = ConfigDict(extra="forbid")

    __tag__: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = [name for name in cls.__annotations__ if not name.startswith("__")]
        if own:
            cls.__tag__ = own[0]

    @property
    def kind(self) -> str:
        """The arm's key on the wire, e.g. ``as_tensor``."""
        return self.__tag__

    @property
    def value(self) -> Any:
        """The arm's payload."""
        return getattr(self, self.__tag__)


def _arm_tag(value: Any) -> str | None:
    """Pick the arm from the single key present; anything else fails as a union error."""
    if isinstance(value, dict):
        if len(value) == 1:
            key = next(iter(value))
            return key if isinstance(key, str) else None
        return None
    tag = getattr(value, "__tag__", None)
    return tag if isinstance(tag, str) else None


@dataclass(frozen=True)
class OneOf:
    """Marks a union of `Arm` models as the torch union `name` (wire form: a one-key object)."""

    name: str
    since: Version = FIRST_KNOWN
    until: Version | None = None

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        arms: tuple[type[Arm], ...] = getattr(source, "__args__", (source,))
        choices: dict[Any, core_schema.CoreSchema] = {
            arm.__tag__: handler.generate_schema(arm) for arm in arms
        }
        return core_schema.tagged_union_schema(
            choices,
            discriminator=_arm_tag,
            custom_error_type="union_arm",
            custom_error_message=f"{self.name} needs exactly one of: {', '.join(choices)}",
            custom_error_context={"union": self.name, "arms": ", ".join(choices)},
        )
