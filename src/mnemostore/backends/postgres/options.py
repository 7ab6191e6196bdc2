"""Options of the postgres backend, validated by pydantic (URL query string or keywords)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SSLMode = Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]


class PostgresOptions(BaseModel):
    """`postgresql://user@host/db?schema=agents&index=hnsw&pool_max_size=20`.

    `schema` is always quoted as an identifier. `host` names a unix-socket directory (or a
    host) when the URL's authority has none. `pool` takes an existing `psycopg_pool.ConnectionPool`
    (keyword only); the store then borrows its connections and never closes it.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, arbitrary_types_allowed=True)

    schema_name: str = Field("public", alias="schema", min_length=1, max_length=63)
    table_prefix: str = Field("mnemo_", pattern=r"^[a-z_][a-z0-9_]{0,39}$")
    pool_min_size: int = Field(1, ge=0, le=1000)
    pool_max_size: int = Field(10, ge=1, le=1000)
    pool_timeout: float = Field(30.0, gt=0)
    """Seconds to wait for a free connection before failing."""
    pool_check_after: float = Field(30.0, ge=0)
    """Seconds a pooled connection may sit idle before it is pinged (a round trip) when taken;
    sooner, a connection the server closed is still noticed, from its socket, without a ping
    (see `PostgresBackend._check`). 0 pings on every checkout."""
    connect_timeout: int = Field(10, ge=1, le=3600)
    """Seconds to wait for the server when connecting."""
    statement_timeout: float | None = Field(None, gt=0)
    """Seconds after which the server cancels a statement (None: the server's default)."""
    sslmode: SSLMode | None = None
    host: str | None = None
    application_name: str = Field("mnemostore", max_length=63)
    index: Literal["exact", "hnsw"] = "hnsw"
    hnsw_m: int = Field(16, ge=2, le=100)
    hnsw_ef_construction: int = Field(128, ge=4, le=1000)
    """Twice pgvector's 64: on 100,000 clustered 384-dim vectors recall@10 at ef_search 40 went
    from 0.80-0.87 to 0.96-0.98, for a build ~1.8x as long (docs/backends/postgres.md)."""
    hnsw_ef_search: int = Field(60, ge=1, le=1000)
    """Above pgvector's 40: recall@10 0.98 there (with ef_construction 128) at ~0.3 ms more."""
    iterative_scan: Literal["strict_order", "relaxed_order"] = "strict_order"
    row_security: Literal["off", "on", "force"] = "off"
    """`on`: every statement names its tenant to the tables' row-level security policies (created
    on first use if this role owns the tables, see row_security.py); `force`: the owner is
    subject to them too. A role they apply to cannot see or write another tenant's rows."""
    pool: Any = Field(None, exclude=True, repr=False)

    @field_validator("schema_name", "application_name")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("must not contain NUL")
        return value

    @model_validator(mode="after")
    def _sizes(self) -> PostgresOptions:
        if self.pool_min_size > self.pool_max_size:
            raise ValueError("pool_min_size must not exceed pool_max_size")
        if self.hnsw_ef_construction < 2 * self.hnsw_m:
            raise ValueError("hnsw_ef_construction must be at least 2 * hnsw_m")
        if self.pool is not None:
            from psycopg_pool import ConnectionPool

            if not isinstance(self.pool, ConnectionPool):
                raise ValueError("pool must be a psycopg_pool.ConnectionPool")
            ignored = [name for name in ("statement_timeout", "sslmode") if getattr(self, name) is not None]
            if ignored:
                raise ValueError(f"{', '.join(ignored)} cannot apply to an existing pool; configure the pool instead")
        return self
