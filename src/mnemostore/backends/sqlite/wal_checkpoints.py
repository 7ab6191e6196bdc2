"""How a SQLite file's WAL is checkpointed: by SQLite itself, inside the commit that crosses its threshold.

Every connection sets `PRAGMAS`. A commit that leaves `AUTOCHECKPOINT` pages or more in the WAL runs a
PASSIVE checkpoint (it blocks no reader and no writer): it copies the WAL's frames into the database up
to the oldest snapshot a reader holds, and the next writer starts the WAL over once all were copied. So
the WAL stays near `AUTOCHECKPOINT` pages, readers look few pages up in it, and its file is rewritten in
place (in the page cache) instead of growing; a reader holding an old snapshot holds the WAL back only
until it ends, and the first commit past the threshold after that copies the rest. A checkpoint cut short
by a crash is redone by the next opener: SQLite's own guarantee.

It replaced a background thread (PASSIVE checkpoints beside the commits past 4 MB of WAL, the writers
checkpointing themselves past 16 MB), which cost more on every thread together (`bench/profile_wal.py`,
callgrind instructions per call): a `MnemostoreSaver.put` of a varied 50 KB state 929k -> 818k
(`SqliteSaver` 766k), a `put_writes` 310k -> 267k (220k), a `get_tuple` right after 300 puts 803k -> 766k
(779k), a facade `checkpoints.save` 1,191k -> 1,115k, a 150-step graph run 361M -> 355M. Process CPU (user
+ sys, medians of 6 runs) moved alike: put 236 -> 193 us (142), put_writes 88 -> 73 us (51), the read
101 -> 90 us (106); the graph's did not measurably (120 -> 126 ms, ranges overlapping), and its wall time,
with a core free for the thread, rose (144 -> 164 ms, median of 8, ranges overlapping). The thread's
checkpoints copied pages that the next commits rewrote, and each commit read the WAL-index header:
against 244k for a `put_writes` with no checkpoint at all, SQLite's own adds ~23k, the thread added ~66k.
"""

from __future__ import annotations

AUTOCHECKPOINT = 1000
"""WAL pages past which a commit checkpoints (SQLite's default, what LangGraph's `SqliteSaver` runs with)."""
JOURNAL_SIZE_LIMIT = 32 * 1024 * 1024
"""A reset WAL larger than this (after a reader held checkpoints back) is truncated to it
(`PRAGMA journal_size_limit`); a smaller one is reused in place. Truncating it at every reset cost
~16 us of CPU per 50 KB commit (its pages written anew)."""
PRAGMAS = (f"PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT}", f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
"""What every connection to a store's file sets."""
