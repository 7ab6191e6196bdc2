"""Collections: one per record kind (`<prefix><kind>`) plus `<prefix>meta`, created lazily.

A kind's collection holds every record of the kind, of every tenant and (for embeddings)
every namespace, as payload fields: Qdrant's own advice for multitenancy, and it keeps
queries and searches across namespaces one call. The embedding is the named vector
`embedding`, optional per point. The store's dimension is known only once the first
embedding is written (or configured), so a collection created before that has no vector
and gets one (`create_vector_name`) the first time the store's dimension is known.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...core.errors import SchemaMismatch
from ...core.kinds import kind_names, record_type
from ...core.protocol import StoreParams
from .handles import Handle
from .payload import TENANT, field_key

if TYPE_CHECKING:
    from qdrant_client import models

VECTOR = "embedding"
_DISTANCES = {"cosine": "Cosine", "dot": "Dot", "l2": "Euclid"}


def distance(metric: str) -> models.Distance:
    from qdrant_client import models

    return models.Distance(_DISTANCES[metric])


class Layout:
    """Names and lazily creates the collections of one store."""

    def __init__(self, handle: Handle, prefix: str) -> None:
        self.handle = handle
        self.prefix = prefix
        self.meta = prefix + "meta"
        self.server = handle.location.mode == "server"

    def name(self, kind: str) -> str:
        return self.prefix + kind

    def open(self) -> None:
        """Create the meta collection if missing and learn which kind collections exist."""
        client = self.handle.client
        with self.handle.lock:
            if not client.collection_exists(self.meta):
                self._create(self.meta, None, None)
            for kind in kind_names():
                self._learn(self.name(kind))

    def _learn(self, name: str) -> bool:
        """Whether collection `name` exists, caching whether it has the embedding vector."""
        if name in self.handle.collections:
            return True
        client = self.handle.client
        if not client.collection_exists(name):
            return False
        vectors = client.get_collection(name).config.params.vectors
        self.handle.collections[name] = isinstance(vectors, dict) and VECTOR in vectors
        return True

    def vector_params(self, kind: str) -> tuple[int, str] | None:
        """(size, metric) of a kind's embedding vector, or None if it has none."""
        name = self.name(kind)
        if not self._learn(name) or not self.handle.collections[name]:
            return None
        vectors = self.handle.client.get_collection(name).config.params.vectors
        assert isinstance(vectors, dict)
        params = vectors[VECTOR]
        metric = {v: k for k, v in _DISTANCES.items()}[params.distance.value]
        return params.size, metric

    def check(self, params: StoreParams) -> None:
        """SchemaMismatch if an existing collection's vector disagrees with the store's parameters."""
        for kind in kind_names():
            found = self.vector_params(kind)
            if found is None:
                continue
            size, metric = found
            if (params.dimension is not None and size != params.dimension) or metric != params.metric:
                raise SchemaMismatch(
                    f"collection {self.name(kind)!r} holds {size}-dimensional {metric} vectors, but the store's "
                    f"parameters are {params.dimension}-dimensional {params.metric}; it was changed outside "
                    "mnemostore: recreate it or re-embed with a migration")

    def exists(self, kind: str) -> bool:
        return self._learn(self.name(kind))

    def known(self, kind: str) -> bool:
        """Whether the kind's collection is known to exist, without asking Qdrant (`exists` may ask)."""
        return self.name(kind) in self.handle.collections

    def known_vector(self, kind: str) -> bool:
        """Whether the kind's collection is known to have the vector, without asking (`has_vector` may ask)."""
        return self.handle.collections.get(self.name(kind)) is True

    def has_vector(self, kind: str) -> bool:
        name = self.name(kind)
        if self.server and self.handle.collections.get(name) is False:
            self.handle.collections.pop(name)  # another process may have added it since
        return self._learn(name) and self.handle.collections[name]

    def ensure(self, kind: str, params: StoreParams) -> str:
        """The kind's collection, created if missing, with the vector once the dimension is known."""
        name = self.ready(kind, params)
        if name is not None:
            return name
        name = self.name(kind)
        with self.handle.lock:
            if not self._learn(name):
                self._create(name, params, kind)
            elif params.dimension is not None and not self.handle.collections[name]:
                self._add_vector(name, params)
        return name

    def ready(self, kind: str, params: StoreParams) -> str | None:
        """The kind's collection name if `ensure` has nothing to do (known, with the vector the
        parameters call for), without asking Qdrant; else None."""
        name = self.name(kind)
        cached = self.handle.collections.get(name)
        return name if cached or (cached is False and params.dimension is None) else None

    def _vector_config(self, params: StoreParams) -> models.VectorParams:
        from qdrant_client import models

        return models.VectorParams(**_dense(params))

    def _create(self, name: str, params: StoreParams | None, kind: str | None) -> None:
        vectors: dict[str, models.VectorParams] = {}
        if params is not None and params.dimension is not None:
            vectors[VECTOR] = self._vector_config(params)
        try:
            self.handle.client.create_collection(name, vectors_config=vectors)
        except Exception:
            if not self.handle.client.collection_exists(name):  # not another process's creation
                raise
        if kind is not None:
            if self.server:
                self._index(name, kind)
            self.handle.collections.pop(name, None)
            self._learn(name)
            if params is not None and params.dimension is not None and not self.handle.collections[name]:
                self._add_vector(name, params)

    def _add_vector(self, name: str, params: StoreParams) -> None:
        from qdrant_client import models

        dense = models.DenseVectorNameConfig(dense=models.DenseVectorConfig(**_dense(params)))
        try:
            self.handle.client.create_vector_name(name, VECTOR, dense)
        except Exception:
            self.handle.collections.pop(name, None)
            if not self.has_vector_uncached(name):  # another process may have added it first
                raise
        self.handle.collections[name] = True

    def has_vector_uncached(self, name: str) -> bool:
        vectors = self.handle.client.get_collection(name).config.params.vectors
        return isinstance(vectors, dict) and VECTOR in vectors

    def _index(self, name: str, kind: str) -> None:
        """Payload indexes on the tenant and every filterable field (a server uses them; local mode has none)."""
        from qdrant_client import models

        self.handle.client.create_payload_index(
            name, TENANT, field_schema=models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True))
        self._index_fields(name, record_type(kind).filterable)

    def index_fields(self, kind: str, fields: Mapping[str, type]) -> None:
        """Payload indexes on the fields a kind's declaration gained (`Backend.evolve_kind`), on a server."""
        if self.server and self.exists(kind):
            self._index_fields(self.name(kind), fields)

    def _index_fields(self, name: str, fields: Mapping[str, type]) -> None:
        from qdrant_client import models

        schemas: dict[type, Any] = {
            str: models.PayloadSchemaType.KEYWORD, bool: models.PayloadSchemaType.BOOL,
            int: models.PayloadSchemaType.INTEGER, float: models.PayloadSchemaType.FLOAT,
            datetime: models.PayloadSchemaType.INTEGER,
        }
        for field, field_type in fields.items():
            self.handle.client.create_payload_index(name, field_key(field), field_schema=schemas[field_type])


def _dense(params: StoreParams) -> dict[str, Any]:
    """The size and distance of the store's vector: what a collection's vector config (`VectorParams`) and
    a vector added to a collection (`DenseVectorConfig`) are both made of."""
    assert params.dimension is not None
    return {"size": params.dimension, "distance": distance(params.metric)}
