"""Summarise a Spark event log (RECORDS_DESTINATION_SPARK_EVENT_LOG): per stage, wall time and where task time went.

`python -m bench.eventlog <event log file or directory>` prints one line per stage: tasks, wall seconds, and the tasks' summed
run, CPU, deserialization, GC, shuffle write and shuffle fetch-wait seconds.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

NS, MS = 1e9, 1e3


def summarize(path: Path) -> list[str]:
    stages: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    names: dict[int, str] = {}
    files = sorted(p for p in path.iterdir() if p.name.startswith("events_")) if path.is_dir() else [path]
    for line in (line for f in files for line in f.read_text().splitlines()):
        event = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            sid = info["Stage ID"]
            names[sid] = info.get("Stage Name", "")
            stages[sid]["wall"] = (info["Completion Time"] - info["Submission Time"]) / MS
        elif kind == "SparkListenerTaskEnd" and "Task Metrics" in event:
            m = event["Task Metrics"]
            s = stages[event["Stage ID"]]
            s["tasks"] += 1
            s["run"] += m.get("Executor Run Time", 0) / MS
            s["cpu"] += m.get("Executor CPU Time", 0) / NS
            s["deserialize"] += m.get("Executor Deserialize Time", 0) / MS
            s["gc"] += m.get("JVM GC Time", 0) / MS
            s["shuffle_write"] += m.get("Shuffle Write Metrics", {}).get("Shuffle Write Time", 0) / NS
            s["fetch_wait"] += m.get("Shuffle Read Metrics", {}).get("Fetch Wait Time", 0) / MS
            s["shuffle_mb"] += m.get("Shuffle Write Metrics", {}).get("Shuffle Bytes Written", 0) / 1e6
    lines = []
    for sid in sorted(stages):
        s = stages[sid]
        lines.append(f"stage {sid} {names.get(sid, '')[:40]:40} tasks {int(s['tasks']):4} wall {s['wall']:7.1f}s "
                     f"run {s['run']:7.1f}s jvm-cpu {s['cpu']:6.1f}s deser {s['deserialize']:5.1f}s gc {s['gc']:5.1f}s "
                     f"shuffle-write {s['shuffle_write']:5.1f}s ({s['shuffle_mb']:,.0f} MB) fetch-wait {s['fetch_wait']:5.1f}s")
    return lines


if __name__ == "__main__":
    for line in summarize(Path(sys.argv[1])):
        print(line)
