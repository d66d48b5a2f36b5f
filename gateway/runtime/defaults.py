"""``default_of``: a dataclass field's default, so that a setting passed down through several
options dataclasses has its default written once, in the lowest one that uses it."""

from __future__ import annotations

import dataclasses
from typing import Any


def default_of(cls: type[Any], name: str) -> Any:
    """The default of field ``name`` of dataclass ``cls`` (works with ``slots=True``)."""
    for field in dataclasses.fields(cls):
        if field.name == name:
            if field.default is not dataclasses.MISSING:
                return field.default
            if field.default_factory is not dataclasses.MISSING:
                return field.default_factory()
            raise ValueError(f"{cls.__name__}.{name} has no default")
    raise AttributeError(f"{cls.__name__} has no field {name!r}")
