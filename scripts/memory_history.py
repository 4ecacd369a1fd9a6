#!/usr/bin/env python3
"""What is alive at a step's memory peak on a GPU, and which code allocated it: reads the CUDA
caching allocator's history that `memfine run --memory-history DIR` writes (one pickle per point and
strategy: PyTorch's memory snapshot, every allocation and free of one step with its C++ frames),
replays it to the moment most bytes were allocated, and lists the blocks alive then, largest first,
each with the first frames of the suite's own code (memfine::) and of ATen's that made it. A table on
stdout; --json FILE for programs.

usage: memory_history.py SNAPSHOT.pickle ... [--top N] [--json FILE]
"""
import os
import pickle
import sys

import summaries


def replay(events):
    """The allocations alive when most bytes were (a list of events), the peak above the start and
    the large allocations and frees in order with what was alive after each."""
    live, cur, best, best_live, timeline = {}, 0, -1, {}, []
    for e in events:
        if e["action"] == "alloc":
            live[e["addr"]] = e
            cur += e["size"]
        elif e["action"] == "free_completed" and e["addr"] in live:
            cur -= live.pop(e["addr"])["size"]
        else:
            continue
        timeline.append((e, cur))
        if cur > best:
            best, best_live = cur, dict(live)
    return best, list(best_live.values()), timeline


def where(frames, n=3):
    """The first frames in the suite's code, else ATen's, else the first ones, as 'name:line'."""
    def short(f):
        name = f.get("name", "?")
        return f"{name[:90]}:{f.get('line', '?')}"
    ours = [f for f in frames if "memfine" in f.get("name", "")]
    aten = [f for f in frames if "at::native" in f.get("name", "") or "at::_ops" in f.get("name", "")]
    pick = ours[:n] or aten[:n] or frames[:n]
    return " < ".join(short(f) for f in pick) or "?"


def summarize(path, top):
    try:
        with open(path, "rb") as f:
            snap = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError) as e:
        raise ValueError(f"{path}: not a memory snapshot: {e}")
    traces = snap.get("device_traces") if isinstance(snap, dict) else None
    if not traces or not any(traces):
        raise ValueError(f"{path}: no allocation history in it (was history recorded?)")
    events = [e for t in traces for e in t]
    peak, alive, _ = replay(events)
    alive.sort(key=lambda e: -e["size"])
    return {"snapshot": os.path.basename(path), "peak_bytes": peak, "alive_at_peak": len(alive),
            "largest": [{"bytes": e["size"], "where": where(e.get("frames", []))} for e in alive[:top]]}


def show(rows):
    for r in rows:
        print(f"{r['snapshot']}: peak {r['peak_bytes'] / 2**30:.3f} GiB above the history's start, "
              f"{r['alive_at_peak']} blocks alive")
        for b in r["largest"]:
            print(f"  {b['bytes'] / 2**20:10.1f} MiB  {b['where']}")


def main(argv=None):
    return summaries.main(argv, __doc__, "SNAPSHOT.pickle", 15, summarize, show)


if __name__ == "__main__":
    sys.exit(main())
