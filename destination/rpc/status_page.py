"""The status page's HTML (read-only; every value escaped): tables with their root and latest version, the last requests,
the requests running now, a chart of recent write throughput, and one page per table with its version history.
Rendered from `Activity.snapshot()` only: a page view reads no storage."""
from __future__ import annotations

import time
from html import escape
from typing import Any
from urllib.parse import urlencode

WRITE_RPCS = ("WriteBatch", "WriteHistoryBatch")
CHART_WRITES = 40
MB = 1 << 20

_STYLE = """
body{font-family:system-ui,sans-serif;margin:0;padding:0 1rem 2rem;color:#1d232a;background:#f7f8fa}
h1{font-size:1.3rem;margin:1rem 0 .25rem}h2{font-size:1.05rem;margin:1.5rem 0 .5rem}
.meta{color:#5b6570;font-size:.85rem}.meta a{margin-left:.5rem}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch;background:#fff;border:1px solid #dde1e6;border-radius:6px}
table{border-collapse:collapse;width:100%;font-size:.85rem}
th,td{padding:.35rem .6rem;text-align:left;white-space:nowrap;border-bottom:1px solid #eef0f3}
th{background:#f0f2f5;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.success{color:#1a7f37}.warning{color:#9a6700}.task{color:#bc4c00}.error{color:#cf222e;font-weight:600}
svg{width:100%;height:auto;max-height:220px;background:#fff;border:1px solid #dde1e6;border-radius:6px}
@media (max-width:600px){body{padding:0 .5rem 1rem}th,td{padding:.3rem .4rem}}
"""


def _page(title: str, body: str) -> bytes:
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            "<meta name=viewport content='width=device-width, initial-scale=1'>"
            f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>{body}</body></html>").encode()


def _when(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch)) if epoch else "–"


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _optional(value: float | None, form: str = "{}") -> str:
    return "" if value is None else form.format(value)


def _table_link(table: dict[str, Any]) -> str:
    query = urlencode({"root": table["root"], "schema": table["schema"], "table": table["table"]})
    return f"<a href='/table?{escape(query)}'>{escape(table['schema'])}.{escape(table['table'])}</a>"


def _rows(cells: list[list[str]], headers: list[str], empty: str, table_id: str) -> str:
    if not cells:
        return f"<p class=meta id={table_id}>{escape(empty)}</p>"
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in cells)
    return f"<div class=scroll><table id={table_id}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def throughput_chart(requests: list[dict[str, Any]]) -> str:
    """An SVG bar chart of the rows per second of the last writes (oldest left); each bar's tooltip adds the MB/s
    of its batch files as sent."""
    writes = [r for r in requests if r["rpc"] in WRITE_RPCS and r["seconds"] > 0][:CHART_WRITES][::-1]
    if not writes:
        return "<p class=meta id=throughput>no writes yet</p>"
    rates = [r["rows"] / r["seconds"] for r in writes]
    top = max(rates) or 1.0
    width, height, left = 600, 180, 70
    step = min(24.0, (width - left) / len(writes))
    bars = []
    for i, (request, rate) in enumerate(zip(writes, rates, strict=True)):
        h = max(1.0, (height - 40) * rate / top)
        tip = (f"{request['table']}: {rate:,.0f} rows/s, {request['bytes'] / MB / request['seconds']:.2f} MB/s, "
               f"{request['rows']} rows in {request['seconds']:.2f}s")
        bars.append(f"<rect x='{left + i * step:.1f}' y='{height - 20 - h:.1f}' width='{max(1.0, step - 2):.1f}' "
                    f"height='{h:.1f}' fill='#2f6feb'><title>{escape(tip)}</title></rect>")
    axis = (f"<text x='2' y='{height - 20 - (height - 40) + 4}' font-size='11'>{top:,.0f} rows/s</text>"
            f"<text x='2' y='{height - 20}' font-size='11'>0</text>"
            f"<line x1='{left}' y1='{height - 20}' x2='{width}' y2='{height - 20}' stroke='#999'/>"
            f"<text x='{left}' y='{height - 5}' font-size='11'>last {len(writes)} writes, oldest first</text>")
    return (f"<svg id=throughput viewBox='0 0 {width} {height}' role=img "
            f"aria-label='rows per second of the last writes'>{axis}{''.join(bars)}</svg>")


def render_index(snapshot: dict[str, Any], spark_ui_url: str | None) -> bytes:
    # a server writes wherever each request's configuration points: the root tells a.b under one from a.b under another
    tables = [[f"<td>{_table_link(t)}</td>", f"<td>{escape(t['root'])}</td>", f"<td class=n>{t['version']}</td>",
               f"<td class=n>{t['rows']}</td>",
               f"<td class=n>{_size(t['bytes'])}</td>", f"<td class=n>{t['files']}</td>",
               f"<td>{_when(t['committed_at'])}</td>"] for t in snapshot["tables"]]
    requests = [[f"<td>{_when(r['finished_at'])}</td>", f"<td>{escape(r['rpc'])}</td>", f"<td>{escape(r['table'])}</td>",
                 f"<td class=n>{r['seconds']:.2f}s</td>", f"<td class=n>{r['rows']}</td>",
                 f"<td class={escape(r['result'])}>{escape(r['result'])}</td>"] for r in snapshot["requests"]]
    running = [[f"<td>{escape(p['rpc'])}</td>", f"<td>{escape(p['table'])}</td>",
                f"<td class=n>{p['tasks_done']}/{p['tasks_total']}</td>",
                f"<td class=n>{_optional(p['files_decoded'])}/{p['files']}</td>", f"<td class=n>{p['elapsed']:.0f}s</td>",
                f"<td class=n>{_optional(p['seconds_left'], '{:.0f}s')}</td>"] for p in snapshot["running"]]
    links = "<a href='/metrics'>metrics</a>"
    if spark_ui_url:
        links += f"<a href='{escape(spark_ui_url)}'>Spark UI</a>"
    body = (f"<h1>records-destination</h1><div class=meta>up since {_when(snapshot['started_at'])}; "
            f"root listed {_when(snapshot['last_listing'])}{links}</div>"
            "<h2>Running</h2>"
            + _rows(running, ["RPC", "table", "Spark tasks", "files decoded", "elapsed", "left"], "nothing running",
                    "running")
            + "<h2>Write throughput</h2>" + throughput_chart(snapshot["requests"])
            + f"<h2>Last requests ({len(requests)})</h2>"
            + _rows(requests, ["finished", "RPC", "table", "duration", "rows", "outcome"], "no requests yet",
                    "requests")
            + f"<h2>Tables ({_count_with_roots(snapshot['tables'])})</h2>"
            + _rows(tables, ["table", "root", "version", "rows", "size", "files", "last commit"], "no tables seen yet",
                    "tables"))
    return _page("records-destination status", body)


def _count_with_roots(tables: list[dict[str, Any]]) -> str:
    roots = len({t["root"] for t in tables})
    return f"{len(tables)} under {roots} roots" if roots > 1 else str(len(tables))


def render_table(table: dict[str, Any] | None) -> bytes:
    if table is None:
        return _page("table not found", "<h1>table not found</h1><p class=meta>not seen by this server "
                     "(yet): <a href='/'>back</a></p>")
    versions = [[f"<td class=n>{v['version']}</td>", f"<td>{_when(v['committed_at'])}</td>",
                 f"<td class=n>{v['rows']}</td>", f"<td class=n>{_size(v['bytes'])}</td>", f"<td class=n>{v['files']}</td>",
                 f"<td class=n>{_optional(v['new_files'])}</td>"] for v in table["versions"]]
    name = f"{table['schema']}.{table['table']}"
    body = (f"<h1>{escape(name)}</h1><div class=meta>{escape(table['root'])}<a href='/'>all tables</a></div>"
            "<h2>Versions seen by this server</h2>"
            + _rows(versions, ["version", "committed", "rows", "size", "files", "new files"], "none", "versions"))
    return _page(name, body)
