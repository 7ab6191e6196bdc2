"""Re-embedding: a new embedding model (or dimension) for a whole store, written beside the old one.

The job streams the store like a copy and writes every record, unchanged but for a new
embedding, into a staging store that has the new dimension and model; the original store is
never modified, so searches keep working on the old vectors while the job runs. It resumes
after an interruption and verifies the result (every record there, every field but the vector
equal, every embedded record re-embedded). Switching over is pointing the configuration at the
staging store once the job has finished, which is why it can only happen when it is complete.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError, MigrationError, ValidationError
from ..core.protocol import StoreParams
from ..core.records import Record
from ..core.vectors import as_vector
from .copying import CopyReport, KindReport, check_batch_size, verify
from .destination import Destination, Origin, opened, same_store
from .progress import Progress, Silent
from .streams import Position, batches, chosen_kinds, digest_kind, every_kind_of, kind_count

if TYPE_CHECKING:
    from ..core.store import Store

EmbedFunction = Callable[[list[str]], Any]
"""Texts to vectors: a list of N texts to N sequences (or an N x dimension array) of floats."""
TextOf = Callable[[Record], "str | None"]


def default_text(record: Record) -> str | None:
    """The text a record's embedding stands for, as its kind says (`Record.embedding_text`): an
    Embedding's text, an outcome's task, a heuristic's condition and strategy, an anti-pattern's
    pattern, an application kind's own choice; checkpoints have none."""
    return record.embedding_text()


def reembed(source: str | Store, staging: str | Store, embed: EmbedFunction, *, model: str, dimension: int,
            text: TextOf = default_text, kinds: Sequence[str] | None = None, batch_size: int = 256,
            progress: Progress | None = None, resume: bool = True, overwrite: bool = False,
            lock_wait: float = 60.0) -> CopyReport:
    """Write every record of `source` into `staging` with its embedding recomputed by `embed` on
    `text(record)`, under the new `model` and `dimension`; verify it. Records without an
    embedding are copied as they are. See the module docstring for the switch-over."""
    check_batch_size(batch_size)
    if not isinstance(model, str) or not model:
        raise ConfigError("model must name the new embedding model")
    if type(dimension) is not int or dimension < 1:
        raise ConfigError(f"dimension must be a positive integer, got {dimension!r}")
    chosen = chosen_kinds(kinds)
    report_to: Progress = progress or Silent()
    started = time.perf_counter()
    with ExitStack() as stack:
        src = stack.enter_context(opened(source, create=False))
        if kinds is None:
            chosen = every_kind_of(src.backend, "re-embedding")
        params = StoreParams(dimension, src.params.metric, model)
        origin = Origin("reembedding", src.backend.url.masked, f"{src.backend.url.masked} as {model}", chosen,
                        params)
        dst = stack.enter_context(opened(staging, params))
        if same_store(src.backend, dst.backend):
            raise MigrationError(f"re-embed into a staging store, not into the source itself ({origin.name})")
        target = stack.enter_context(Destination(dst, origin, resume=resume, overwrite=overwrite,
                                                 lock_wait=lock_wait))
        job = _Job(embed, text, dimension)
        reports = {kind: job.run_kind(src, target, kind, batch_size, report_to) for kind in chosen}
        target.finish()
        return CopyReport(origin.name, target.name, reports, time.perf_counter() - started, target.resumed)


class _Job:
    def __init__(self, embed: EmbedFunction, text: TextOf, dimension: int) -> None:
        self.embed = embed
        self.text = text
        self.dimension = dimension

    def run_kind(self, src: Store, target: Destination, kind: str, batch_size: int,
                 progress: Progress) -> KindReport:
        position = target.position
        skipped = position is not None and position.finished(kind)
        start: Position | None = position if position is not None and position.kind == kind else None
        written = 0
        began = time.perf_counter()
        if not skipped:
            progress.begin(f"re-embed {kind}", kind_count(src.backend, kind))
            for tenant, page in batches(src.backend, kind, batch_size, start):
                target.write(kind, tenant, self.reembedded(page))
                written += len(page)
                progress.advance(len(page))
            progress.end()
        seconds = time.perf_counter() - began
        began = time.perf_counter()
        progress.begin(f"verify {kind}", None)
        expected = digest_kind(src.backend, kind, batch_size, progress.advance, vectors=False)
        found = digest_kind(target.backend, kind, batch_size, progress.advance, vectors=False)
        progress.end()
        verify(kind, expected.totals, found.totals, src.backend.url.masked, target.name)
        return KindReport(kind, written, found.count, found.hexdigest, seconds, time.perf_counter() - began)

    def reembedded(self, page: Sequence[Record]) -> list[Record]:
        """The page with each embedded record's vector recomputed (one `embed` call per page)."""
        embedded = [i for i, record in enumerate(page) if record.embedding is not None]
        texts: list[str] = []
        for i in embedded:
            found = self.text(page[i])
            if not isinstance(found, str):
                raise MigrationError(f"no text to re-embed {page[i].kind} {page[i].id!r} from; pass text= (a "
                                     "function record -> str) that covers every kind with embeddings")
            texts.append(found)
        if not texts:
            return list(page)
        vectors = self.embed(texts)
        if len(vectors) != len(texts):
            raise MigrationError(f"the embedding function returned {len(vectors)} vectors for {len(texts)} texts")
        result = list(page)
        for n, i in enumerate(embedded):
            try:
                vector = as_vector(vectors[n], "embedding", self.dimension)
            except ValidationError as exc:
                raise MigrationError(f"the embedding function's vector for {page[i].kind} {page[i].id!r} "
                                     f"is unusable: {exc}") from None
            result[i] = page[i].model_copy(update={"embedding": vector})
        return result


