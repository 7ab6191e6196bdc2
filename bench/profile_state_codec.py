"""What a checkpoint's state costs to encode, prove and decode: the proof a save runs (the C walk where it
is built, and the Python proof it replaces) beside one msgpack pack and LangGraph's serializer, on the bench's states.

    python bench/profile_state_codec.py                    # both states, 2,000 calls each
    python bench/profile_state_codec.py --state varied --calls 500

Sides, each timed call by call in turns (`harness.interleaved_samples`), medians in microseconds:
- `proof`: `prove_json_document`, what a save pays: one C walk giving the sorted JSON and msgpack (`core/_proof.c`);
- `python proof`: `prove_in_python` (sorted orjson dump, sorted msgpack pack, NUL and NaN scans): without a compiler;
- `msgpack proof`: one sorted msgpack pack refusing every type JSON would change (`_EXACT_TYPES`): ormsgpack's
  pass alone, without the sorted JSON the state's hash is taken of (a floor for the proof);
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

from mnemostore.core.jsonvalues import _EXACT_TYPES, prove_in_python, prove_json_document

STATES = {"repeated": checkpoint_state, "varied": varied_state}


def _sides(state: dict[str, object]) -> dict[str, object]:
    """Each side's call on `state`, by name."""
    serde = JsonPlusSerializer()
    as_json = orjson.dumps(state, option=orjson.OPT_SORT_KEYS)
    as_msgpack = ormsgpack.packb(state, option=_EXACT_TYPES)
    return {
        "proof": lambda i: prove_json_document(state, "state"),
        "python proof": lambda i: prove_in_python(state, "state"),
        "msgpack proof": lambda i: ormsgpack.packb(state, option=_EXACT_TYPES),
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
        print(f"  encode and prove: proof / python proof {medians['proof'] / medians['python proof']:.2f}, "
              f"proof / serde {medians['proof'] / medians['serde']:.2f}; "
              f"decode: msgpack / json {medians['msgpack load'] / medians['json load']:.2f}")


if __name__ == "__main__":
    main()
