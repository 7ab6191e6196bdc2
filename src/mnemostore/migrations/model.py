"""What a migration is: a layout step of one backend, or a record step run on every backend.

Each migration has an id, the ids it must come after, and a checksum of its normalised
content (SQL text, or the source of its functions and their parameters), which the ledger
keeps so an edited migration is noticed instead of silently skipped.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import CodeType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from ..core.errors import ConfigError
from ..core.kinds import is_kind, kind_names
from ..core.records import KINDS, Record

if TYPE_CHECKING:
    from ..core.declarations import KindChange
    from ..core.protocol import Backend

Direction = Literal["up", "down"]
Layer = Literal["layout", "records", "kinds"]

LayoutStep = Sequence[str] | Callable[["Backend"], None]
"""SQL statements (run by a SQL backend's `run_layout`) or a function of the open backend."""
RecordChange = Callable[[Record], Mapping[str, Any] | None]
"""A record's field changes (`{"metadata": {...}}`), or None to leave it as it is."""
RecordMoveStep = Callable[[Record], Record | None]
"""A record as the other kind of a `RecordMove` holds it, or None to leave it where it is."""

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")


def normalise(text: str) -> str:
    """Content as compared by checksums: dedented, whitespace runs collapsed."""
    return re.sub(r"\s+", " ", textwrap.dedent(text)).strip()


def _describe_const(value: object) -> str:
    """A code constant as the same text in every process (no addresses, no set order)."""
    if isinstance(value, CodeType):
        consts = ";".join(map(_describe_const, value.co_consts))
        return f"code({value.co_code.hex()}|{','.join(value.co_names)}|{consts})"
    if isinstance(value, tuple | frozenset):
        items = [_describe_const(item) for item in value]
        return f"{type(value).__name__}({','.join(sorted(items) if isinstance(value, frozenset) else items)})"
    return repr(value)


def describe_step(step: LayoutStep | RecordChange | RecordMoveStep | None) -> str:
    """The normalised content of one step: its statements, or its function's source (a
    partial's function and arguments; a callable object's class)."""
    if step is None:
        return ""
    if isinstance(step, functools.partial):
        return f"partial {describe_step(step.func)} {step.args!r} {sorted(step.keywords.items())!r}"
    if callable(step):
        target = step if inspect.isroutine(step) or inspect.isclass(step) else type(step)
        try:
            return normalise(inspect.getsource(target))
        except (OSError, TypeError):  # defined interactively: fall back to the code object
            code = getattr(target, "__code__", None)
            return f"{getattr(target, '__qualname__', '?')}:{_describe_const(code) if code else ''}"
    return ";\n".join(normalise(statement) for statement in step)


def _check_id(value: str, what: str) -> None:
    if not isinstance(value, str) or not _ID.match(value):
        raise ConfigError(f"{what} {value!r} is not a valid migration id (letters, digits, '_.:-', max 200)")


@dataclass(frozen=True)
class Migration:
    """Fields shared by both layers. `after` names the migrations this one must follow."""

    id: str
    after: tuple[str, ...] = ()
    description: str = ""
    checksum: str = field(init=False, default="")

    layer: Layer = field(init=False, default="layout")

    def __post_init__(self) -> None:
        _check_id(self.id, "migration id")
        object.__setattr__(self, "after", tuple(self.after))
        for dependency in self.after:
            _check_id(dependency, f"dependency of {self.id}:")
        digest = hashlib.sha256(self.content().encode()).hexdigest()
        object.__setattr__(self, "checksum", digest)

    def content(self) -> str:
        """What the checksum covers."""
        raise NotImplementedError

    @property
    def ledger_layer(self) -> Layer:
        """The layer the ledger records: an older mnemostore refuses a store with layout steps it does not know."""
        return self.layer

    @property
    def reversible(self) -> bool:
        raise NotImplementedError

    @property
    def transactional(self) -> bool:
        raise NotImplementedError


@dataclass(frozen=True)
class LayoutMigration(Migration):
    """One change to a backend's storage layout (tables, indexes, collections).

    A backend lists its layout history, oldest first, in `Backend.layout_migrations`; each
    implicitly comes after the one before it. `atomic=False` declares a step the engine
    cannot run in a transaction with its ledger write (e.g. `CREATE INDEX CONCURRENTLY`).
    """

    backend: str = ""
    up: LayoutStep = ()
    down: LayoutStep | None = None
    atomic: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "layer", "layout")
        if not self.backend:
            raise ConfigError(f"layout migration {self.id!r} must name its backend")
        if not callable(self.up):
            object.__setattr__(self, "up", tuple(self.up))
        if self.down is not None and not callable(self.down):
            object.__setattr__(self, "down", tuple(self.down))
        super().__post_init__()

    def content(self) -> str:
        return f"layout {self.backend}\nup: {describe_step(self.up)}\ndown: {describe_step(self.down)}"

    @property
    def reversible(self) -> bool:
        return self.down is not None

    @property
    def transactional(self) -> bool:
        return self.atomic

    def step(self, direction: Direction) -> LayoutStep:
        step = self.up if direction == "up" else self.down
        if step is None:
            raise ConfigError(f"layout migration {self.id!r} cannot be reverted")
        return step

    def sql(self, direction: Direction = "up") -> list[str]:
        """The statements of one direction (empty for a function step), for `plan --sql`."""
        step = self.up if direction == "up" else self.down
        return [] if step is None or callable(step) else list(step)


@dataclass(frozen=True)
class RecordStep(Migration):
    """What record migrations and record moves share: batches of `batch_size`, resumable, never in one
    transaction; `new_stores=False` for a step no record this code writes needs (a brand-new store
    records it as applied without reading anything); `locks_out_older=True` to record it in the ledger
    as a layout step, so an older mnemostore refuses the store (`StoreTooNew`)."""

    noun: ClassVar[str] = "record migration"
    batch_size: int = 500
    new_stores: bool = True
    locks_out_older: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "layer", "records")
        if type(self.batch_size) is not int or self.batch_size < 1:
            raise ConfigError(f"{self.noun} {self.id!r}: batch_size must be a positive integer")
        super().__post_init__()

    @property
    def ledger_layer(self) -> Layer:
        return "layout" if self.locks_out_older else self.layer

    @property
    def transactional(self) -> bool:
        return False

    def functions(self) -> tuple[Callable[[Record], Any] | None, Callable[[Record], Any] | None]:
        """The step's (up, down) record functions; down None if it cannot be reverted."""
        raise NotImplementedError

    @property
    def reversible(self) -> bool:
        return self.functions()[1] is not None


_Function = TypeVar("_Function", bound=Callable[[Record], Any])


def _chosen(step: RecordStep, up: _Function | None, down: _Function | None, direction: Direction) -> _Function:
    """`up` or `down` of a record step, refused if the direction has none."""
    function = up if direction == "up" else down
    if function is None:
        raise ConfigError(f"{step.noun} {step.id!r} cannot be reverted")
    return function


@dataclass(frozen=True)
class RecordMigration(RecordStep):
    """A change to records, written once against the protocol and run on every backend.

    `change` maps a record to its field changes (or None); it runs in batches of
    `batch_size` in id order per kind and tenant, resumable after an interruption, so it
    must be idempotent (applying it to an already-changed record changes nothing).
    `parameters` joins the function's source in the checksum. `new_stores=False` declares a change
    no record this code writes needs (mnemostore's own rehash): a brand-new store, which holds no
    records yet, records it as applied without reading anything. `locks_out_older=True` records it in
    the ledger as a layout step, so an older mnemostore, which does not know it, refuses the store
    (`StoreTooNew`) instead of writing records the way the migration undid (mnemostore's own migrations).
    """

    kinds: tuple[str, ...] = KINDS
    change: RecordChange | None = None
    revert: RecordChange | None = None
    parameters: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", tuple(self.kinds))
        unknown = [kind for kind in self.kinds if not is_kind(kind)]
        if unknown or not self.kinds:
            raise ConfigError(
                f"record migration {self.id!r}: unknown kinds {unknown}; known: {', '.join(kind_names())}")
        if self.change is None:
            raise ConfigError(f"record migration {self.id!r} needs a change function")
        super().__post_init__()

    def content(self) -> str:
        return (f"records {','.join(self.kinds)} {self.parameters!r}\nchange: {describe_step(self.change)}"
                f"\nrevert: {describe_step(self.revert)}")

    def functions(self) -> tuple[RecordChange | None, RecordChange | None]:
        return self.change, self.revert

    def function(self, direction: Direction) -> RecordChange:
        return _chosen(self, self.change, self.revert, direction)


@dataclass(frozen=True)
class RecordMove(RecordStep):
    """Records moved from one kind to another, written once against the protocol and run on every backend.

    `move` gives a record of `source` as the `target` kind holds it, under the same id or another (or
    None to leave it); `move_back` undoes it. Batches run in id order per tenant, each put into the other
    kind (leaving one an interrupted run put already, or an earlier record moved to the same id) before
    it is deleted from its own, so a run resumes without losing or doubling anything. `target` names the
    target kind's class as `module:qualname`: imported and registered for the run only, so planning a move
    registers no kind. The other fields are `RecordMigration`'s (mnemostore's own moves set `locks_out_older`).
    """

    noun: ClassVar[str] = "record move"
    source: str = ""
    target: str = ""
    move: RecordMoveStep | None = None
    move_back: RecordMoveStep | None = None

    def __post_init__(self) -> None:
        if not is_kind(self.source) or self.target.count(":") != 1 or self.move is None:
            raise ConfigError(f"record move {self.id!r} needs a known source kind, a target kind class as "
                              "'module:qualname' and a move function")
        super().__post_init__()

    def content(self) -> str:
        return (f"move {self.source} -> {self.target}\nmove: {describe_step(self.move)}"
                f"\nmove back: {describe_step(self.move_back)}")

    def functions(self) -> tuple[RecordMoveStep | None, RecordMoveStep | None]:
        return self.move, self.move_back

    def target_class(self) -> type[Record]:
        """The target kind's class (its module imported)."""
        module, qualname = self.target.split(":")
        found: Any = importlib.import_module(module)
        for name in qualname.split("."):
            found = getattr(found, name)
        if not (isinstance(found, type) and issubclass(found, Record)):
            raise ConfigError(f"record move {self.id!r}: {self.target} is not a record kind class")
        return found

    def function(self, direction: Direction) -> RecordMoveStep:
        return _chosen(self, self.move, self.move_back, direction)


@dataclass(frozen=True)
class KindMigration(Migration):
    """An application kind a store holds, brought to the code's grown declaration (`KindChange`):
    columns or payload keys for new filterable fields, backfilled from the stored documents, and
    indexes. Planned from the store's recorded declaration, not listed anywhere; the recorded
    declaration, rewritten when the step completes, is its ledger. Each step can run again."""

    change: KindChange | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "layer", "kinds")
        if self.change is None:
            raise ConfigError(f"kind migration {self.id!r} needs its change")
        super().__post_init__()

    def content(self) -> str:
        return f"kinds {self.id}"

    @property
    def reversible(self) -> bool:
        return False

    @property
    def transactional(self) -> bool:
        return False
