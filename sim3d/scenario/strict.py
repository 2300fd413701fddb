"""The base every section of the scenario format builds on: strict, frozen, no unknown keys, and
each key's other spellings (Megatron's, NeMo's) accepted beside sim3d's."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, ConfigDict, Field


def alias(*names: str, **field):
    """A field read under any of `names` (the first is sim3d's)."""
    return Field(validation_alias=AliasChoices(*names), **field)


class Strict(BaseModel):
    # strict: `tp: true` or `layers: 2.5` is an error, not 1 or 2; no inf/nan reaches a divisor.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True,
                              allow_inf_nan=False)
