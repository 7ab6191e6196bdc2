"""The record kinds: pydantic models validated at the boundary.

Datetimes must be timezone-aware (naive ones are rejected, never guessed) and keep
their offset; ordering and filters compare instants. Strings may not contain NUL.
Embeddings are float32 arrays checked with numpy (see `vectors.as_vector`).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

import orjson
import xxhash
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    model_validator,
)
from pydantic import (
    ValidationError as PydanticValidationError,
)

from .base64text import to_text
from .errors import ValidationError
from .jsonvalues import check_text, dumps_json_document, find_json_problem, prove_json_document, remember_proven
from .vectors import as_vector, vectors_equal


def _text(value: str) -> str:
    problem = check_text(value)
    if problem:
        raise ValueError(f"string {problem}")
    return value


def _metadata(value: dict[str, Any]) -> dict[str, Any]:
    found = find_json_problem(value, "")
    if found:
        path, problem = found
        raise ValueError(f"{path.lstrip('.')}: {problem}" if path else problem)
    return value


def convert_validation_error(exc: PydanticValidationError) -> ValidationError:
    """pydantic's error as ours: one (field, message) per problem, field as a dotted path."""
    errors: list[tuple[str, str]] = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error["loc"])
        nested = error.get("ctx", {}).get("error")
        if isinstance(nested, ValidationError):  # raised by a model validator: keep its fields
            errors.extend((f"{field}.{sub}" if field and sub else field or sub, message)
                          for sub, message in nested.errors)
            continue
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "missing":
            message = "is required"
        errors.append((field, message))
    return ValidationError(errors)


def _vector(value: Any) -> Any:
    if value is None:
        return None
    try:
        return as_vector(value)
    except ValidationError as exc:
        raise ValueError(exc.errors[0][1]) from None


def _dump_vector(value: Any) -> Any:
    return None if value is None else value.tolist()


def _payload(value: Any) -> bytes | None:
    """Opaque bytes as they are: `bytes`, or a bytearray/memoryview copied into immutable bytes.
    A str is refused (its encoding would be a guess), as is anything else."""
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise ValueError(f"must be bytes (or None), not {type(value).__name__}")


def _dump_payload(value: bytes | None) -> str | None:
    return None if value is None else to_text(value)


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    """A random UUID4 as 32 hex digits, as `uuid.uuid4().hex` writes it, without building a `UUID`
    (~1 us instead of ~2-3: every record saved without an id pays it)."""
    data = bytearray(os.urandom(16))
    data[6] = data[6] & 0x0F | 0x40  # version 4
    data[8] = data[8] & 0x3F | 0x80  # RFC 4122 variant
    return data.hex()


Text = Annotated[str, AfterValidator(_text)]
MAX_ID = 512
"""Characters an id (or another identifier: run, branch, tenant) may have."""
Identifier = Annotated[str, Field(min_length=1, max_length=MAX_ID), AfterValidator(_text)]
Metadata = Annotated[dict[str, Any], AfterValidator(_metadata)]
Embedding_ = Annotated[Any, PlainValidator(_vector), PlainSerializer(_dump_vector)]
Payload = Annotated[bytes | None, PlainValidator(_payload), PlainSerializer(_dump_payload, when_used="json")]
NonNegative = Annotated[int, Field(ge=0, le=2**63 - 1)]


class Record(BaseModel):
    """Fields every kind shares. `kind` names the collection a kind lives in."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, revalidate_instances="never")

    kind: ClassVar[str]
    filterable: ClassVar[dict[str, type]]
    """Fields a filter or an ordering may name, with the Python type of their values."""
    incrementable: ClassVar[frozenset[str]] = frozenset()
    """Numeric fields `update(..., inc=...)` may increment."""
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = ()
    """Filterable field combinations queried often: a backend with secondary indexes builds one
    per entry, led by the tenant (every kind also gets `(created_at, id)`, the default order,
    unless it sets `default_order_index = False`)."""
    default_order_index: ClassVar[bool] = True
    """Whether a backend with secondary indexes builds `(created_at, id)` for the default order. A kind
    read by id (ranges) or by its own indexes turns it off: one index less to update on every write,
    and a query in the default order sorts the matching records instead."""
    checked_fields: ClassVar[tuple[str, ...]] = ()
    """Fields whose values `_check_values` proves storable (set by `register_kind` for an
    application's kind; the built-in kinds' annotations carry their own bounds)."""

    id: Identifier = Field(default_factory=new_id)
    tenant_id: Identifier | None = None
    agent: Text | None = None
    project_id: Text | None = None
    created_at: AwareDatetime = Field(default_factory=utcnow)
    updated_at: AwareDatetime = Field(default_factory=utcnow)
    metadata: Metadata = Field(default_factory=dict)
    embedding: Embedding_ = None

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except PydanticValidationError as exc:
            raise convert_validation_error(exc) from None

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except PydanticValidationError as exc:
            raise convert_validation_error(exc) from None

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Any:
        try:
            return super().model_validate(obj, **kwargs)
        except PydanticValidationError as exc:
            raise convert_validation_error(exc) from None

    @model_validator(mode="after")
    def _check_values(self) -> Record:
        """Plain JSON everywhere every engine stores it: no NUL in text, 64-bit integers, finite floats."""
        for name in self.checked_fields:
            found = find_json_problem(self.__dict__.get(name), name)
            if found:
                raise ValidationError.one(*found)
        return self

    @classmethod
    def derived_updates(cls, changes: dict[str, Any]) -> dict[str, Any]:
        """Fields an update must also set because `changes` set their inputs (none by default)."""
        return {}

    def embedding_text(self) -> str | None:
        """The text this record's embedding stands for, from which re-embedding recomputes it
        (None: the kind has none, and re-embedding asks for `text=`). A kind overrides it."""
        return None

    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other):
            return NotImplemented
        assert isinstance(other, Record)
        mine, theirs = dict(self.__dict__), dict(other.__dict__)
        return vectors_equal(mine.pop("embedding"), theirs.pop("embedding")) and mine == theirs

    __hash__ = None  # type: ignore[assignment]


COMMON_FILTERABLE: dict[str, type] = {
    "id": str,
    "agent": str,
    "project_id": str,
    "created_at": datetime,
    "updated_at": datetime,
}
"""The shared fields every kind may filter and order by (`register_kind` adds them to a declaration)."""


class Outcome(Record):
    """One attempt at a task and how it went."""

    kind: ClassVar[str] = "outcome"
    filterable: ClassVar[dict[str, type]] = {
        **COMMON_FILTERABLE, "task_type": str, "success": bool, "strategy_used": str, "duration_ms": int,
    }
    incrementable: ClassVar[frozenset[str]] = frozenset()
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("agent",), ("task_type",))

    task_type: Text
    task_description: Text = ""
    success: bool
    strategy_used: Text = ""
    duration_ms: NonNegative | None = None
    error_message: Text | None = None
    user_feedback: Text | None = None

    def embedding_text(self) -> str | None:
        return self.task_description or self.task_type


class Heuristic(Record):
    """A learned rule: in `condition`, `strategy` tends to work."""

    kind: ClassVar[str] = "heuristic"
    filterable: ClassVar[dict[str, type]] = {
        **COMMON_FILTERABLE, "condition": str, "strategy": str, "confidence": float,
        "occurrence_count": int, "success_count": int, "last_validated": datetime,
    }
    incrementable: ClassVar[frozenset[str]] = frozenset({"occurrence_count", "success_count"})
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("agent",),)

    condition: Text
    strategy: Text
    confidence: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] = 0.5
    occurrence_count: NonNegative = 0
    success_count: NonNegative = 0
    last_validated: AwareDatetime | None = None
    prior_confidence: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] | None = None
    """The confidence before the first `reinforce` (set then): the prior it combines with the counters."""

    def embedding_text(self) -> str | None:
        return f"{self.condition}\n{self.strategy}"


class AntiPattern(Record):
    """Something to avoid, why, and what to do instead."""

    kind: ClassVar[str] = "anti_pattern"
    filterable: ClassVar[dict[str, type]] = {
        **COMMON_FILTERABLE, "pattern": str, "occurrence_count": int, "last_seen": datetime,
    }
    incrementable: ClassVar[frozenset[str]] = frozenset({"occurrence_count"})
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("agent",),)

    pattern: Text
    why_bad: Text = ""
    better_alternative: Text = ""
    occurrence_count: NonNegative = 1
    last_seen: AwareDatetime | None = None

    def embedding_text(self) -> str | None:
        return self.pattern


class Checkpoint(Record):
    """A snapshot of a run's state; `parent_ids` holds several parents after a merge."""

    kind: ClassVar[str] = "checkpoint"
    filterable: ClassVar[dict[str, type]] = {
        **COMMON_FILTERABLE, "run_id": str, "node_id": str, "sequence": int, "branch_id": str,
        "state_hash": str,
    }
    incrementable: ClassVar[frozenset[str]] = frozenset()
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("run_id", "sequence", "branch_id"),)

    run_id: Identifier
    node_id: Text = ""
    sequence: NonNegative = 0
    branch_id: Identifier = "main"
    parent_ids: list[Identifier] = Field(default_factory=list)
    state: dict[str, Any] = Field(default_factory=dict)
    state_hash: str = ""
    update: dict[str, Any] | None = None
    """The partial update `checkpoints.apply` folded into the parent's state to make `state`, kept so a
    merge can fold it again; None for a snapshot (`save`, `merge`)."""
    payload: Payload = None
    """Opaque bytes an integration keeps beside the state (LangGraph's serialized checkpoint): not
    part of `state` nor of `state_hash`, not filterable; stored as bytes where the engine has a
    binary column, as base64 text inside a JSON document elsewhere (`codec`)."""

    @model_validator(mode="after")
    def _check_state(self) -> Checkpoint:
        """Prove the state is lossless JSON, and stamp its hash unless one was given."""
        data, packed = prove_json_document(self.state, "state")
        remember_proven(self.state, data, packed)
        if not self.state_hash:
            object.__setattr__(self, "state_hash", state_digest(data))
        return self

    @model_validator(mode="after")
    def _check_update(self) -> Checkpoint:
        """Prove the kept update is lossless JSON, as the state is."""
        if self.update is not None:
            dumps_json_document(self.update, "update")
        return self

    @classmethod
    def derived_updates(cls, changes: dict[str, Any]) -> dict[str, Any]:
        if "state" in changes:
            return {"state_hash": hash_state(changes["state"])}
        return {}


def hash_state(state: dict[str, Any]) -> str:
    """The `state_hash` of a state, proven lossless JSON first."""
    return state_digest(dumps_json_document(state, "state"))


def hash_exact_state(state: dict[str, Any]) -> str:
    """`hash_state` of a state its caller built of checked text, ints and None only: the same bytes
    without the proof that they read back equal (a walk that costs more than the hash)."""
    return state_digest(orjson.dumps(state, option=orjson.OPT_SORT_KEYS))


def state_digest(canonical_json: bytes) -> str:
    """A `state_hash`: xxh3-128 (32 hex digits) of the state's canonical JSON (sorted keys, so equal
    states hash equally): a fast digest for finding equal states, not a cryptographic one. Stored and
    filterable: another algorithm needs a migration rehashing stored checkpoints (`migrations.state_hashes`)."""
    return xxhash.xxh3_128_hexdigest(canonical_json)


class Embedding(Record):
    """A free-standing vector with its text, namespace and model name."""

    kind: ClassVar[str] = "embedding"
    filterable: ClassVar[dict[str, type]] = {
        **COMMON_FILTERABLE, "namespace": str, "model": str, "text": str,
    }
    incrementable: ClassVar[frozenset[str]] = frozenset()
    indexes: ClassVar[tuple[tuple[str, ...], ...]] = (("namespace",), ("agent",))

    namespace: Identifier = "default"
    text: Text = ""
    model: Text = ""

    def embedding_text(self) -> str | None:
        return self.text


RECORD_TYPES: dict[str, type[Record]] = {
    cls.kind: cls for cls in (Outcome, Heuristic, AntiPattern, Checkpoint, Embedding)
}
KINDS: tuple[str, ...] = tuple(RECORD_TYPES)
"""The built-in kinds, in their canonical order; `core.kinds` knows every registered kind."""

