"""What a checkpoint's state costs to encode, prove and decode: today's JSON form beside a one-pass msgpack
form (the design the facade save and read rows would need; see the issue 14 notes), on the bench's states.

    python bench/profile_state_codec.py                    # both states, 2,000 calls each
    python bench/profile_state_codec.py --state varied --calls 500

Sides, each timed call by call in turns (`harness.interleaved_samples`), medians in microseconds:
- `json proof`: `dumps_json_document` (sorted orjson dump, msgpack proof, NUL and NaN scans): what a save pays;
- `msgpack proof`: one sorted msgpack pack refusing every type JSON would change (`_EXACT_TYPES`): the one
  pass that would both prove and give canonical bytes to hash;
- `serde`: LangGraph's `JsonPlusSerializer.dumps_typed`, what `SqliteSaver.put` pays for the same state;
- `json load` / `msgpack load`: decoding each form back (what a read pays).
"""

from __future__ import annotations

import argparse

import orjson
import ormsgpack
from data import checkpoint_state, varied_state
from harness import interleaved_samples, median
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from mnemostore.core.jsonvalues import _EXACT_TYPES, dumps_json_document

STATES = {"repeated": checkpoint_state, "varied": varied_state}


def _sides(state: dict[str, object]) -> dict[str, object]:
    """Each side's call on `state`, by name."""
    serde = JsonPlusSerializer()
    as_json = orjson.dumps(state, option=orjson.OPT_SORT_KEYS)
    as_msgpack = ormsgpack.packb(state, option=_EXACT_TYPES | ormsgpack.OPT_SORT_KEYS)
    return {
        "json proof": lambda i: dumps_json_document(state, "state"),
        "msgpack proof": lambda i: ormsgpack.packb(state, option=_EXACT_TYPES | ormsgpack.OPT_SORT_KEYS),
        "serde": lambda i: serde.dumps_typed(state),
        "json load": lambda i: orjson.loads(as_json),
        "msgpack load": lambda i: ormsgpack.unpackb(as_msgpack),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", choices=[*STATES, "both"], default="both")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    for name in STATES if args.state == "both" else [args.state]:
        state = STATES[name]()
        sides = _sides(state)
        medians = {key: median(values) * 1e6 for key, values in interleaved_samples(sides, args.calls).items()}  # type: ignore[arg-type]
        print(f"{name} state, {len(orjson.dumps(state)):,} bytes of JSON: median us per call of {args.calls:,}")
        for key, us in medians.items():
            print(f"  {key:<14} {us:8.1f}")
        print(f"  encode and prove: msgpack / json {medians['msgpack proof'] / medians['json proof']:.2f}; "
              f"decode: msgpack / json {medians['msgpack load'] / medians['json load']:.2f}")


if __name__ == "__main__":
    main()
