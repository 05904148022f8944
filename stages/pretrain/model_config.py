"""The pretrain stage's model section, `pretrain.model`: a union of one section per family
(stages/pretrain/model_families.py), picked by `family` (or by the family of `preset`).
To the user it reads as one flat section: errors name `pretrain.model.<key>`, an unknown
family gets the message a flat Literal key gets, and the dump is the flat record of all the
families' keys the stages' fingerprints were computed from before the union existed.

    section = model_config(family="t5", num_layers=2)   # a T5ModelConfig
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Discriminator, Tag, TypeAdapter, ValidationError, ValidatorFunctionWrapHandler, WrapValidator

from stages.models.config import PRESETS
from stages.pretrain.model_families import BertModelConfig, GptModelConfig, ModelSection, T5ModelConfig

_FAMILY = TypeAdapter(ModelSection.model_fields["family"].annotation)  # Literal["gpt", "bert", "t5"]


def _family_of(data: Any) -> str:
    """The union's tag: `family`; unset, the preset's family, else gpt (the key's default)."""
    if isinstance(data, ModelSection):
        return data.family
    if not isinstance(data, dict):
        return "gpt"  # not a mapping: the gpt section says so
    if data.get("family") is not None:
        return data["family"]
    return PRESETS[data["preset"]][0] if data.get("preset") in PRESETS else "gpt"


def _as_one_section(data: Any, validate_by_family: ValidatorFunctionWrapHandler) -> ModelSection:
    # An unknown family is refused as the flat section's Literal key was (same message, at
    # pretrain.model.family); the chosen family's errors lose the union's tag from their
    # location, so they name pretrain.model.<key> as before.
    try:
        _FAMILY.validate_python(_family_of(data))
    except ValidationError as error:
        raise _relocated(error, lambda loc: ("family", *loc)) from None
    try:
        return validate_by_family(data)
    except ValidationError as error:
        raise _relocated(error, lambda loc: loc[1:]) from None


def _relocated(error: ValidationError, move) -> ValidationError:
    return ValidationError.from_exception_data(error.title, [
        {"type": item["type"], "loc": move(tuple(item["loc"])), "input": item["input"],
         **({"ctx": item["ctx"]} if "ctx" in item else {})}
        for item in error.errors()])


ModelConfig = Annotated[
    Union[Annotated[GptModelConfig, Tag("gpt")], Annotated[BertModelConfig, Tag("bert")],
          Annotated[T5ModelConfig, Tag("t5")]],
    Discriminator(_family_of), WrapValidator(_as_one_section)]
_ADAPTER: TypeAdapter = TypeAdapter(ModelConfig)


def model_config(**keys: Any) -> ModelSection:
    """The family's section for `keys` (pretrain.model's keys); ValidationError as the config gets."""
    return _ADAPTER.validate_python(keys)

