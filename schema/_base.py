"""Building blocks of the wire models: field metadata, structs, union arms, wire floats."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    PlainSerializer,
    SerializationInfo,
)
from pydantic_core import core_schema

from schema._wire import (
    CONTAINERS,
    NonFinite,
    fields_of,
    keep_exact_made,
    keep_exact_one,
    nonfinite,
    noted,
    unmark,
)

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
    return NonFinite({"Infinity": math.inf, "-Infinity": -math.inf}.get(value, math.nan))


def _nonfinite_out(value: NonFinite, info: SerializationInfo) -> float | str:
    return value.__wire__ if info.mode_is_json() else float(value)


@dataclass(frozen=True, slots=True)
class WireName:
    """Names a wire scalar whose Python annotation is not the plain type (see WireFloat)."""

    name: str


#: torch writes non-finite floats as these strings; they parse to float and dump back to them.
#: A finite float stays a plain float (the first arm); a non-finite one, from the strings or a
#: NaN, an infinity or an overflowing number, is held as a `NonFinite` (see `schema._wire`).
WireFloat = Annotated[
    Annotated[float, Field(allow_inf_nan=False)]
    | Annotated[float, AfterValidator(nonfinite), PlainSerializer(_nonfinite_out)]
    | Annotated[Literal["Infinity", "-Infinity", "NaN"], AfterValidator(_nonfinite)],
    WireName("float"),
]


class _Model(BaseModel):
    """Common config: strict types, torch's float strings, keep unknown keys.

    Every way a model can come to carry unknown keys or lack a field (validation that keeps
    extras, construction, assignment, copies, unpickling) hands it to `keep_exact`, so that
    `schema.dump` may write all other models straight from their `__dict__`.
    """

    model_config = ConfigDict(
        strict=True,
        extra="allow",
        ser_json_inf_nan="strings",
        validate_default=False,
        revalidate_instances="never",
    )

    __since__: ClassVar[Version] = FIRST_KNOWN
    __until__: ClassVar[Version | None] = None
    #: What orjson's callback writes for the model (see `schema._wire`).
    __wire__ = property(fields_of)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # a subclass of a natively written class must not inherit the unchecked `__wire__`
        cls.__wire__ = _Model.__dict__["__wire__"]

    def __init__(self, /, **data: Any) -> None:
        # BaseModel.__init__'s one step, without the cost of a second call
        self.__pydantic_validator__.validate_python(data, self_instance=self)
        if self.__pydantic_extra__:
            unmark(type(self))
        for name, given in data.items():
            if type(given) in CONTAINERS:
                keep_exact_made(given, self.__dict__.get(name))

    # Construction from Python only: marked as pydantic's own, so that validation (which makes
    # models without calling __init__) does not call it once per model.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name not in type(self).__pydantic_fields__ or type(value) is float:
            keep_exact_one(self)

    @classmethod
    def model_validate(cls, obj: Any, **options: Any) -> Self:
        """Pydantic's `model_validate`; extras it keeps are noted (see `keep_exact`)."""
        return noted(super().model_validate(obj, **options), options)

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **options: Any) -> Self:
        """Pydantic's `model_validate_json`; extras it keeps are noted (see `keep_exact`)."""
        return noted(super().model_validate_json(json_data, **options), options)

    @classmethod
    def model_validate_strings(cls, obj: Any, **options: Any) -> Self:
        """Pydantic's `model_validate_strings`; extras it keeps are noted (see `keep_exact`)."""
        return noted(super().model_validate_strings(obj, **options), options)

    @classmethod
    def model_construct(  # type: ignore[override]  # the plugin's per-model signature
        cls, _fields_set: set[str] | None = None, **values: Any
    ) -> Self:
        """Pydantic's `model_construct`; a model left without a field or with an unknown one
        is noted (see `keep_exact`)."""
        made = super().model_construct(_fields_set, **values)
        keep_exact_one(made)
        return made

    def model_copy(self, *, update: Any = None, deep: bool = False) -> Self:
        """Pydantic's `model_copy`; unknown keys in `update` are noted (see `keep_exact`)."""
        copied = super().model_copy(update=update, deep=deep)
        if update:
            keep_exact_one(copied)
        return copied

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        keep_exact_one(self)


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


def arm_tag(value: Any) -> str | None:
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
            discriminator=arm_tag,
            custom_error_type="union_arm",
            custom_error_message=f"{self.name} needs exactly one of: {', '.join(choices)}",
            custom_error_context={"union": self.name, "arms": ", ".join(choices)},
        )
