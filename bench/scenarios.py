"""What a run measures: its scales and its scenario groups, as the command line gives them."""
from __future__ import annotations

GROUPS = ("load", "parquet", "parquet_full", "uniform", "new_keys", "truncate", "history", "clustered", "small_syncs",
          "fleet", "soak", "steady")
FLEET = "fleet"  # many small syncs across many tables, several calls in flight (bench/fleet.py); no --rows scale
SOAK = "soak"  # a long run of small syncs, the server's resources sampled as it goes (bench/soak.py); no --rows scale
STEADY = "steady"  # small syncs at two table sizes and over thousands of commits (bench/steady.py); no --rows scale
SECTIONS = {FLEET, SOAK, STEADY}  # groups with a report section of their own: a run of these alone writes only theirs
NEEDS = {"uniform": ("load",), "new_keys": ("load", "parquet"), "truncate": ("parquet",), "clustered": ("load",)}


def rows_option(text: str) -> list[int]:
    """`10M,30M,100M` → [10000000, 30000000, 100000000] (K, M and G suffixes, or plain numbers)."""
    out = []
    for part in text.split(","):
        part = part.strip().upper().replace("_", "")
        factor = {"K": 10**3, "M": 10**6, "G": 10**9}.get(part[-1:], 1)
        out.append(int(float(part[:-1] if factor > 1 else part) * factor))
    return out


def selected_groups(text: str, with_needs: bool = True) -> set[str]:
    """The groups `--scenarios` names, and (`with_needs`) the groups they bring."""
    groups = {g.strip() for g in text.split(",") if g.strip()} if text != "all" else set(GROUPS)
    unknown = groups - set(GROUPS)
    if unknown:
        raise SystemExit(f"unknown scenario group(s) {sorted(unknown)}; known: {', '.join(GROUPS)}")
    for g in list(groups) if with_needs else []:
        groups |= set(NEEDS.get(g, ()))
    return groups


def requested_groups(groups: set[str]) -> set[str]:
    """`groups` without the ones only brought by the others (a run's measured groups as its command asked for them)."""
    return groups - {need for g in groups for need in NEEDS.get(g, ())}
