"""The layout-1 fixture stores (tests/fixtures/legacy/): copying them and their expected content."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson

from mnemostore import KINDS, Store
from mnemostore.core.jsonvalues import dumps_json_document
from mnemostore.core.kinds import record_type
from mnemostore.core.records import hash_state
from mnemostore.migrations.state_hashes import sha256_state_digest

LAYOUT1 = Path(__file__).parent / "fixtures" / "legacy" / "layout1"


def expected() -> dict[str, Any]:
    """expected.json: params, tenants, and every record as the old code read it back, with the
    defaults of fields added since (an old record reads back with them)."""
    data: dict[str, Any] = orjson.loads((LAYOUT1 / "expected.json").read_bytes())
    return with_new_defaults(data)


def with_new_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """`data["records"]` with each record's missing fields (added to its kind since) at their defaults,
    and each checkpoint's `state_hash`, the SHA-256 the old code stamped, as the state-hash migration
    leaves it (xxh3-128 of the same state)."""
    for item in data["records"]:
        fields = record_type(item["kind"]).model_fields
        for name in fields.keys() - item["record"].keys():
            item["record"][name] = fields[name].get_default(call_default_factory=True)
        if item["kind"] == "checkpoint":
            canonical = dumps_json_document(item["record"]["state"], "state")
            assert item["record"]["state_hash"] == sha256_state_digest(canonical), "the fixture's hash is SHA-256"
            item["record"]["state_hash"] = hash_state(item["record"]["state"])
    return data



def expected_records(tenant: str | None) -> list[dict[str, Any]]:
    return [item["record"] | {"kind": item["kind"]} for item in expected()["records"]
            if item["record"]["tenant_id"] == tenant]


def copy_fixture(name: str, destination: Path) -> Path:
    """A private copy of one fixture store (opening a store writes to it)."""
    source = LAYOUT1 / name
    target = destination / name
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copy2(source, target)
    return target


def read_back(store: Store) -> list[dict[str, Any]]:
    """Every record of the store's tenant, dumped like expected.json, sorted by kind then id."""
    found = []
    for kind in sorted(KINDS):
        for record in store.collection(kind).query(order_by="id"):
            dumped = record.model_dump(mode="json")
            dumped["embedding"] = None if record.embedding is None else [float(x) for x in record.embedding]
            found.append(dumped | {"kind": kind})
    return found
