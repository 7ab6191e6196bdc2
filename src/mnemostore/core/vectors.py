"""Embedding vectors: validated with numpy, held as read-only float32 arrays."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ValidationError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.float32]
else:
    Vector = Any


def as_vector(value: Any, field: str = "embedding", dimension: int | None = None) -> Vector:
    """Convert a sequence, buffer or array of numbers to a read-only 1-D float32 array, or raise.

    float32 is the storage type everywhere, so a vector reads back exactly as validated.
    Strings and booleans are refused, not converted (numpy would read "0.5" and True as numbers).
    """
    import numpy as np

    if isinstance(value, np.ndarray) and value.dtype == np.float32 and not value.flags.writeable:
        array = value
    else:
        if isinstance(value, (str, bytes, dict)):
            raise ValidationError.one(field, f"must be a sequence of numbers, not {type(value).__name__}")
        try:
            with np.errstate(over="ignore"):  # too large for float32 becomes inf, rejected below
                array = np.asarray(value)
                kind = array.dtype.kind
                if kind == "O" and all(type(x) in (int, float) for x in array.ravel()):
                    kind = "f"  # ints beyond 64 bits: numbers still (too large ones are refused below)
                if kind not in "fiu":
                    raise TypeError("strings and booleans are not numbers" if kind in "USb"
                                    else f"found {array.dtype} values")
                array = array.astype(np.float32)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValidationError.one(field, f"must be a sequence of numbers ({exc})") from None
        if array.ndim != 1:
            raise ValidationError.one(field, f"must be one-dimensional, got shape {array.shape}")
        if array.size == 0:
            raise ValidationError.one(field, "must not be empty")
        if not np.isfinite(array).all():
            raise ValidationError.one(field, "must contain only finite float32 numbers (no NaN, infinity, "
                                             "or magnitudes beyond 3.4e38)")
        array.setflags(write=False)
    if dimension is not None and array.shape[0] != dimension:
        raise ValidationError.one(
            field, f"has dimension {array.shape[0]}, but this store's dimension is {dimension}"
        )
    return array


def vectors_equal(a: Vector | None, b: Vector | None) -> bool:
    import numpy as np

    if a is None or b is None:
        return a is None and b is None
    return bool(np.array_equal(a, b))
