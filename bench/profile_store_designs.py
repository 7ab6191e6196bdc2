"""What a LangGraph store batch's Python would cost in other designs: instructions per item to make a batch's
statement parameters from its `PutOp`s (checks, ids, documents, rows; not SQLite's part, which
`profile_store.py --parts` shows equal to `SqliteStore`'s), counted by callgrind.

    python bench/profile_store_designs.py                  # every design, 1,000 puts
    python bench/profile_store_designs.py --sides today,fused --n 300

Sides: `today`, what `MnemostoreStore.batch` runs (its plan, `plain_fields`, `FieldRows.rows`, the flattening
`schema.insert_rows` does); `fused`, one loop from the ops to the same parameters (the same checks, the same
SHA-256 ids, the same documents); `fused_ordered`, with ids made of the encoded namespace and key (no hash);
`fused_narrow`, with a document holding no field a column holds; `fused_both`; `theirs`, `SqliteStore`'s own
loop making its parameters. The fused sides are sketches to measure designs by, not code the store runs: they
write nothing, and `fused` gives today's parameters (checked below). Each side runs under callgrind twice on
the same ops, once skipping the call; the difference divided by `--n` is one item's instructions (main thread).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIDES = ("today", "fused", "fused_ordered", "fused_narrow", "fused_both", "theirs")


def _sides(store: Any, ops: list[Any]) -> dict[str, Callable[[], object]]:
    """Each side's call on `ops` (puts of new items into `store`, index-less and holding a batch already)."""
    import orjson
    from langgraph.store.sqlite.base import _namespace_to_text

    from mnemostore.core.jsonvalues import find_json_problem
    from mnemostore.core.records import utcnow
    from mnemostore.integrations.langgraph import MnemostoreStore, store_mapping
    from mnemostore.kinds.langgraph_ids import item_id

    ours = MnemostoreStore(store)
    now = utcnow()
    common = {**store_mapping.plain_common(now, now), "tenant_id": None, "embedding": None}
    prepared: Any = store.backend._written_kind("langgraph_item")
    dumps = orjson.dumps

    def today() -> list[Any]:
        plan = ours._plan(ops)
        each = store_mapping.plain_fields(ours.scope, [(key, op.value) for key, op in plan.puts.items()])
        return list(itertools.chain.from_iterable(prepared.field_rows(common, each[0]).rows(common, each)))

    expected = today()
    head = tuple(expected[:len(expected) // len(ops) - 5])  # the columns `common` sets, before a row's own 5
    stamp = dumps(now)
    before_metadata = (b',"tenant_id":null,"agent":null,"project_id":null,"created_at":' + stamp
                       + b',"updated_at":' + stamp + b',"metadata":')

    def fused(ordered: bool = False, narrow: bool = False) -> list[Any]:
        roots: dict[tuple[str, ...], str] = {}
        seen: dict[tuple[tuple[str, ...], str], None] = {}
        made: list[Any] = []
        extend = made.extend
        for namespace, key, value, _, _ in ops:
            if not (type(key) is str and key.isascii() and "\x00" not in key) \
                    or find_json_problem(value, "value") is not None:
                raise ValueError("a sketch: the bench's items all pass")
            encoded = roots.get(namespace)
            if encoded is None:
                encoded = roots[namespace] = ours.scope + ":" + store_mapping.encode_namespace(namespace)
            ident = (encoded + key.replace("%", "%25").replace("/", "%2F") if ordered
                     else item_id(ours.scope, namespace, key))
            meta = dumps(value)
            document = b"{}" if narrow else b"".join((
                b'{"id":', dumps(ident), before_metadata, meta, b',"namespace":', dumps(encoded), b',"key":',
                dumps(key), b',"model":""}'))
            seen[(namespace, key)] = None
            extend(head)
            extend((ident, encoded, key, meta.decode(), bytearray(document)))
        return made

    def theirs() -> tuple[str, list[Any]]:
        values, params = [], []
        for op in ops:
            values.append("(?, ?, ?, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, ?, ?)")
            params.extend([_namespace_to_text(op.namespace), op.key, orjson.dumps(dict(op.value)), None, None])
        return ",".join(values), params

    assert fused() == expected, "the fused sketch no longer makes today's parameters"
    return {"today": today, "fused": fused, "fused_ordered": lambda: fused(ordered=True),
            "fused_narrow": lambda: fused(narrow=True), "fused_both": lambda: fused(True, True), "theirs": theirs}


def _run(side: str, n: int, skip: bool) -> None:
    from case_langgraph_store import _items
    from langgraph.store.base import PutOp

    import mnemostore
    from mnemostore.integrations.langgraph import MnemostoreStore

    items = [PutOp(*item) for item in _items(1000 + n)]
    with tempfile.TemporaryDirectory() as tmp, mnemostore.open(f"sqlite:///{tmp}/designs.db") as store:
        MnemostoreStore(store).batch(items[:1000])  # the table made, its statements prepared
        call = _sides(store, items[1000:])[side]
        if not skip:
            call()


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from profile_save import callgrind_arguments, callgrind_instructions

    parser = callgrind_arguments(__doc__, 1_000, ",".join(SIDES), state=None)
    parser.add_argument("--skip", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        _run(args.run, args.n, args.skip)
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(f"instructions per item to make a batch's parameters ({args.n:,} puts, main thread)")
        for side in args.sides.split(","):
            counts = []
            for skip in (True, False):
                out = Path(tmp) / f"{side}-{skip}"
                out.mkdir()
                script = [__file__, "--run", side, "--n", str(args.n), "--dir", str(out), *(["--skip"] if skip else [])]
                counts.append(callgrind_instructions(script, out)[0])
            print(f"  {side:14s} {(counts[1] - counts[0]) / args.n:9,.0f}", flush=True)


if __name__ == "__main__":
    main()
