"""Qdrant points built from records core has already validated.

A put builds one `PointStruct` per record. Pydantic's validation would check every float of
the vector (~60 us a point) and `model_construct` walks the model's fields generically on
each call (~1.8 us); `point_builder` sets what `model_construct` sets, directly (~0.5 us),
as `core.codec.trusted_record` builds records. It falls back to `model_construct` if
qdrant-client's `PointStruct` ever stops being the plain three-field model this assumes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qdrant_client import models

PointBuilder = Callable[[str, dict[str, Any], dict[str, Any]], "models.PointStruct"]
_FIELDS = ("id", "vector", "payload")


@cache
def point_builder() -> PointBuilder:
    """A function (point id, vector dict, payload) -> PointStruct, equal to `PointStruct.model_construct`'s."""
    from qdrant_client import models

    cls = models.PointStruct
    if tuple(cls.model_fields) != _FIELDS or cls.model_config.get("extra") == "allow" or cls.__pydantic_post_init__:
        return lambda id, vector, payload: cls.model_construct(id=id, vector=vector, payload=payload)
    new = cls.__new__
    set_attribute = object.__setattr__
    every_field = set(_FIELDS)  # shared, as model_construct(_fields_set=...) shares it: every field is set already

    def build(id: str, vector: dict[str, Any], payload: dict[str, Any]) -> models.PointStruct:
        point = new(cls)
        set_attribute(point, "__dict__", {"id": id, "vector": vector, "payload": payload})
        set_attribute(point, "__pydantic_fields_set__", every_field)
        set_attribute(point, "__pydantic_extra__", None)
        set_attribute(point, "__pydantic_private__", None)
        return point

    return build
