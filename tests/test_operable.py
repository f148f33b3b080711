"""Operable in production: /metrics counts what a tester run did (rows, files, versions, requests), long writes log
progress lines, the status page shows the run's tables and requests in a real headless Chromium (desktop and phone
sized), and every log line carries its context."""
from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from destination.protocol import common, sdk, sdk_grpc
from destination.rpc.server import start_status
from destination.rpc.service import DestinationService
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.tester.display import CallProgress, render
from destination.tester.harness import Harness
from testbed.s3server import free_port
from tests.browser import chromium
from tests.conftest import spec_of
from tests.rpc_helpers import table
from tests.serverproc import SERVING, start_server, wait_for
from tests.test_write_path import SYS, create, r, write
from tests.tester_inputs import INPUTS_FOLDER

INPUT = INPUTS_FOLDER / "clickhouse" / "input_update_and_hard_delete.json"
PHONE = (390, 844)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def status_url(grpc_endpoint: tuple[str, DestinationService]) -> Iterator[str]:
    """The in-process server's HTTP port (/metrics and the status page), on a free port."""
    service = grpc_endpoint[1]
    status, lister = start_status(service.options, service, 0)
    yield f"http://127.0.0.1:{status.port}"
    lister.stop()
    status.stop()


def get(url: str) -> tuple[str, str]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.headers["Content-Type"], response.read().decode()


def scrape(status_url: str) -> Samples:
    _type, text = get(f"{status_url}/metrics")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def run_tester(grpc_server: str, schema: str, root: Path, workdir: Path) -> Harness:
    workdir.mkdir(parents=True)
    harness = Harness(grpc_server, schema, {"root": str(root)}, False, "csv", workdir)
    grpc.channel_ready_future(harness.channel).result(timeout=60)
    harness.run_file(INPUT)
    assert harness.calls > 0 and harness.failures == 0
    return harness


def written_files(store: TableStore, schema: str, name: str) -> list[Any]:
    """The data files each committed version of the table wrote (not carried from the version before)."""
    latest = store.load(schema, name)
    assert latest is not None
    seen: set[str] = set()
    new = []
    for n in range(1, latest.version + 1):
        version = store.load(schema, name, version=n)
        assert version is not None
        new += [f for f in version.files if f.name not in seen]
        seen = {f.name for f in version.files}
    return new


def test_metrics_count_what_a_tester_run_did(grpc_server: str, status_url: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    before = scrape(status_url)
    harness = run_tester(grpc_server, "metered", root, tmp_path / "batches")
    after = scrape(status_url)

    store = TableStore(open_storage(spec_of({"root": str(root)})))
    names = store.list_tables("metered")
    assert names
    for name in names:
        label = f"metered.{name}"
        latest = store.load("metered", name)
        assert latest is not None
        assert value(after, "records_destination_table_version", table=label) == latest.version
        assert value(after, "records_destination_table_data_files", table=label) == len(latest.files)
        assert value(after, "records_destination_table_rows", table=label) == latest.rows
        new = written_files(store, "metered", name)
        assert delta(before, after, "records_destination_files_written_total", table=label) == len(new)
        assert delta(before, after, "records_destination_rows_written_total", table=label) == sum(f.rows for f in new)
        assert delta(before, after, "records_destination_bytes_written_total", table=label) == sum(f.bytes for f in new)
    requests = {key: v - before.get(key, 0.0) for key, v in after.items()
                if key[0] == "records_destination_requests_total" and dict(key[1])["table"].startswith("metered.")}
    assert sum(requests.values()) == harness.calls
    assert all(dict(labels)["result"] == "success" for (_n, labels), count in requests.items() if count)
    assert delta(before, after, "records_destination_commit_attempts_total") >= sum(
        store.load("metered", n).version for n in names)  # type: ignore[union-attr]
    written_rows = sum(r["rows"] for r in json.loads(get(f"{status_url}/api/status")[1])["requests"]
                       if r["table"].startswith("metered.") and r["rpc"] == "WriteBatch")
    assert written_rows > 0
    assert delta(before, after, "records_destination_batch_rows_total", rpc="WriteBatch") == written_rows
    assert value(after, "process_resident_memory_bytes") > 0


def test_requests_total_counts_the_rpcs_without_a_table(grpc_server: str, status_url: str, tmp_path: Path) -> None:
    """Every RPC answered is counted: ConfigurationForm, Test (a failure as `task`) and Capabilities too, with an
    empty `table` label; the calls made here are the oracle."""
    stub = sdk_grpc.DestinationConnectorStub(grpc.insecure_channel(grpc_server))
    before = scrape(status_url)
    for _ in range(2):
        stub.ConfigurationForm(common.ConfigurationFormRequest())
    stub.Capabilities(sdk.CapabilitiesRequest())
    assert stub.Test(common.TestRequest(name="storage", configuration={"root": str(tmp_path)})).success
    for missing in ("a", "b", "c"):
        assert stub.Test(common.TestRequest(name="storage", configuration={"root": str(tmp_path / missing)})).failure
    after = scrape(status_url)
    counted = {(rpc, result): delta(before, after, "records_destination_requests_total", rpc=rpc, table="",
                                    result=result)
               for rpc in ("ConfigurationForm", "Capabilities", "Test") for result in ("success", "task")}
    assert counted == {("ConfigurationForm", "success"): 2, ("ConfigurationForm", "task"): 0,
                       ("Capabilities", "success"): 1, ("Capabilities", "task"): 0,
                       ("Test", "success"): 1, ("Test", "task"): 3}
    recorded = [r["rpc"] for r in json.loads(get(f"{status_url}/api/status")[1])["requests"]][:7]
    assert sorted(recorded) == ["Capabilities", "ConfigurationForm", "ConfigurationForm", "Test", "Test", "Test", "Test"]


def test_table_label_is_bounded_to_the_most_recently_active_tables() -> None:
    from prometheus_client import CollectorRegistry, Counter

    from destination.process.metrics import TableLabels

    counter = Counter("bounded_test", "a table-labelled counter", ["table"], registry=CollectorRegistry())
    labels = TableLabels(3, [counter])
    for i in range(10):
        counter.labels(labels.label("s", f"t{i}")).inc()
    labels.label("s", "t7")  # active again: stays
    counter.labels(labels.label("s", "t10")).inc()
    kept = {s.labels["table"] for s in next(iter(counter.collect())).samples if s.name.endswith("_total")}
    assert kept == {"s.t7", "s.t9", "s.t10"} and labels.tracked() == ["s.t9", "s.t7", "s.t10"]


def test_long_writes_log_progress_lines(stub: Any, grpc_endpoint: tuple[str, DestinationService], status_url: str,
                                        through_spark_tasks: None, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress lines every interval (0.05 s here, RECORDS_DESTINATION_PROGRESS_INTERVAL), and the tester's live bar
    from the server's /api/progress meanwhile."""
    monkeypatch.setattr(grpc_endpoint[1].observer, "progress_interval", 0.05)
    configuration = {"root": str(tmp_path / "root")}
    t = table("slow", [("id", "INT", True), ("v", "STRING"), ("n", "INT"), *SYS])
    create(stub, configuration, "progress", t)
    capsys.readouterr()
    terminal = io.StringIO()
    with CallProgress(terminal, True, status_url, "progress", poll_seconds=0.02).call("WriteBatch", "slow (3 files)"):
        write(stub, configuration, "progress", t, tmp_path, replace=[r(i, f"v{i}") for i in range(20000)],
              update=[r(i, "u") for i in range(0, 20000, 7)], delete=[r(i, "") for i in range(0, 20000, 11)])
    drawn = terminal.getvalue().split("\r")
    assert any(line.startswith("WriteBatch slow (3 files): ") and "] Spark tasks " in line for line in drawn), drawn
    assert drawn[-1] == ""  # the bar is cleared for the call's own line
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    progress = [line for line in lines if ": progress: " in line["message"]]
    assert progress, [line["message"] for line in lines]
    assert all(line["schema"] == "progress" and line["table"] == "slow" for line in progress)
    assert all(line["message"].startswith("[WriteBatch] progress.slow: progress: ") for line in progress)
    with_tasks = [line["message"] for line in progress if "Spark tasks" in line["message"]]
    assert with_tasks, [line["message"] for line in progress]
    assert any("/3 batch files decoded" in message for message in with_tasks), with_tasks
    final = [line for line in lines if line["message"].startswith("[WriteBatch] progress.slow: ")
             and " rows from 3 files: " in line["message"]]
    assert len(final) == 1 and final[0]["schema"] == "progress"


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def test_status_page_in_headless_chromium(grpc_server: str, status_url: str, tmp_path: Path) -> None:
    run_tester(grpc_server, "paged", tmp_path / "root", tmp_path / "batches")
    store = TableStore(open_storage(spec_of({"root": str(tmp_path / "root")})))
    # a request whose configuration carries credentials: the page names its root, never its secret
    secret = "never-on-the-page-8f3a"
    configuration = {"root": str(tmp_path / "root"), "aws_access_key_id": "AKIA-on-no-page",
                     "aws_secret_access_key": secret}
    with grpc.insecure_channel(grpc_server) as channel:
        create(sdk_grpc.DestinationConnectorStub(channel), configuration, "paged", table("with_secret", [("id", "INT", True)]))
    names = store.list_tables("paged")
    content_type, html = get(f"{status_url}/")
    assert content_type.startswith("text/html") and "with_secret" in html
    for page in (html, get(f"{status_url}/api/status")[1],
                 get(f"{status_url}/table?root={tmp_path / 'root'}&schema=paged&table=with_secret")[1]):
        assert secret not in page and "AKIA-on-no-page" not in page

    with chromium(1280, 900) as browser:
        browser.get(f"{status_url}/")
        tables = browser.find_element("id", "tables").text
        for name in names:
            assert f"paged.{name}" in tables
        requests = browser.find_element("id", "requests").text
        assert "WriteBatch" in requests and "CreateTable" in requests and "paged." in requests
        assert browser.find_element("id", "throughput").tag_name == "svg"
        browser.save_screenshot(str(tmp_path / "desktop.png"))
        browser.find_element("link text", f"paged.{names[0]}").click()
        latest = store.load("paged", names[0])
        assert latest is not None
        history = browser.find_element("id", "versions").text
        assert f"paged.{names[0]}" in browser.title and str(latest.version) in history.split("\n")[1]

    with chromium(*PHONE) as phone:
        phone.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                              {"width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 1, "mobile": True})
        phone.get(f"{status_url}/")
        assert f"paged.{names[0]}" in phone.find_element("id", "tables").text
        # the page itself never scrolls sideways on a phone: wide tables scroll inside their own box
        page_width = phone.execute_script("return document.documentElement.scrollWidth")
        assert page_width <= PHONE[0], f"the page is {page_width}px wide on a {PHONE[0]}px screen"
        phone.save_screenshot(str(tmp_path / "phone.png"))
    assert png_size(tmp_path / "phone.png") == PHONE
    assert png_size(tmp_path / "desktop.png")[0] >= 1000
    assert (tmp_path / "phone.png").stat().st_size > 5000  # not a blank image


def test_status_page_names_each_table_s_root(grpc_server: str, status_url: str, tmp_path: Path) -> None:
    roots = [tmp_path / "root-a", tmp_path / "root-b"]
    with grpc.insecure_channel(grpc_server) as channel:
        for root in roots:  # one server, two configurations: the same schema.table under each root
            create(sdk_grpc.DestinationConnectorStub(channel), {"root": str(root)}, "rooted", table("twin", [("id", "INT", True)]))
    html = get(f"{status_url}/")[1]
    rows = html.split("id=tables>", 1)[1].split("</table>", 1)[0].split("<tr>")
    assert "<th>root</th>" in rows[1], rows[1]
    twins = [row for row in rows if ">rooted.twin</a>" in row]
    # before: two identical rows "rooted.twin", no root on the page
    assert sorted(next(str(root) for root in roots if f"<td>{root}</td>" in row) for row in twins) == sorted(map(str, roots))
    assert "under " in html.split("<h2>Tables (", 1)[1].split(")", 1)[0]  # every other test's root is listed too


class CountingHarness(Harness):
    """The tester, keeping the row figure it reports for each WriteHistoryBatch ("users (3 rows)")."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.history_rows: list[int] = []

    def report(self, rpc: str, target: str, outcome: str, ok: bool) -> None:
        if rpc == "WriteHistoryBatch":
            self.history_rows.append(int(target.rsplit("(", 1)[1].split()[0]))
        super().report(rpc, target, outcome, ok)


@pytest.mark.parametrize("path", ["decoded on the driver", "decoded in tasks"])
def test_status_page_counts_history_rows_as_the_tester_and_lists_requests_before_tables(
        grpc_server: str, status_url: str, server_options: Any, tmp_path: Path, path: str) -> None:
    if path == "decoded in tasks":
        server_options(small_request_bytes=0)  # every request takes the staged path (TableWrites._merge_staged)
    (tmp_path / "batches").mkdir()
    schema = f"hist_rows_{path.split()[-1]}"
    harness = CountingHarness(grpc_server, schema, {"root": str(tmp_path)}, False, "csv", tmp_path / "batches")
    grpc.channel_ready_future(harness.channel).result(timeout=60)
    harness.run_file(INPUT.parent / "input_history_mode.json")
    assert harness.failures == 0 and harness.history_rows
    with chromium(1280, 900) as browser:
        browser.get(f"{status_url}/")
        shown = [row.find_elements("tag name", "td") for row in
                 browser.find_element("id", "requests").find_elements("tag name", "tr")]
        figures = [int(cells[4].text) for cells in shown
                   if len(cells) > 4 and cells[1].text == "WriteHistoryBatch" and cells[2].text.startswith(f"{schema}.")]
        assert figures[::-1] == harness.history_rows  # the page lists the newest first
        # what an operator looks for first comes first: running requests, then the last requests, then the tables
        tops = [browser.find_element("id", name).location["y"] for name in ("running", "requests", "tables")]
        assert tops == sorted(tops), tops


def test_status_page_and_metrics_endpoints_answer(status_url: str) -> None:
    content_type, text = get(f"{status_url}/metrics")
    assert content_type.startswith("text/plain") and "records_destination_requests_total" in text
    _type, progress = get(f"{status_url}/api/progress")
    assert json.loads(progress) == {"running": []}
    with pytest.raises(urllib.error.HTTPError) as missing:
        get(f"{status_url}/table?schema=none&table=none")
    assert missing.value.code == 404


@pytest.mark.serve
def test_serve_with_metrics_port_log_context_and_port_file(tmp_path: Path) -> None:
    """A `serve` process: its log lines carry the account and group, the request's ones its schema and table; the
    port file names the port it listens on, which the Docker HEALTHCHECK's probe follows without an address."""
    port_file = tmp_path / "port"
    metrics_port = free_port()
    server = start_server(str(tmp_path / "root"), tmp_path / "log", "--metrics-port", str(metrics_port),
                          FIVETRAN_ACCOUNT_NAME="acme", FIVETRAN_GROUP_NAME="warehouse",
                          RECORDS_DESTINATION_PORT_FILE=str(port_file))
    try:
        wait_for(lambda: server.health() == SERVING, "SERVING", server)
        assert server.address == f"127.0.0.1:{int(port_file.read_text())}"
        probe = subprocess.run([sys.executable, "-m", "destination.rpc.healthcheck"], capture_output=True, text=True,
                               env={**os.environ, "RECORDS_DESTINATION_PORT_FILE": str(port_file)}, timeout=60)
        assert probe.returncode == 0 and probe.stdout.strip() == "SERVING", probe.stdout
        create(server.stub(), {}, "ctx", table("t", [("id", "INT", True), *SYS]))
        _type, text = get(f"http://127.0.0.1:{metrics_port}/metrics")
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(text) for s in family.samples}
        assert value(samples, "records_destination_requests_total", rpc="CreateTable", table="ctx.t",
                     result="success") == 1
        assert value(samples, "records_destination_table_version", table="ctx.t") == 1
    finally:
        server.stop()
    lines = server.messages()
    assert lines and all(line["account_name"] == "acme" and line["group_name"] == "warehouse" for line in lines)
    created = [line for line in lines if line["message"].startswith("[CreateTable] ctx.t: created")]
    assert len(created) == 1 and (created[0]["schema"], created[0]["table"]) == ("ctx", "t")
    assert all("schema" not in line for line in lines if line["message"].startswith("listening on port"))


def test_health_probe_address_follows_the_port_file(tmp_path: Path) -> None:
    from destination.rpc.healthcheck import default_address

    written = tmp_path / "port"
    written.write_text("50123\n")
    assert default_address(str(written)) == "localhost:50123"
    assert default_address(str(tmp_path / "absent")) == "localhost:50052"  # not written yet: the image's default
    assert default_address(None) == "localhost:50052"


def test_dockerfile_healthcheck_has_no_fixed_port() -> None:
    text = (Path(__file__).resolve().parent.parent / "Dockerfile").read_text()
    healthcheck = text[text.index("HEALTHCHECK --"):].split("\n")[1]
    assert healthcheck.strip() == 'CMD ["python3", "-m", "destination.rpc.healthcheck"]'
    assert "RECORDS_DESTINATION_PORT_FILE=" in text


def test_log_lines_carry_account_group_and_request(capsys: pytest.CaptureFixture[str]) -> None:
    from destination.runtime import logs

    try:
        logs.set_process_context(account_name="acme", group_name="")
        logs.info("outside")
        with logs.request_scope("s", "t"):
            logs.warning("inside")
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    finally:
        logs.set_process_context()
    assert lines[0] == {"level": "INFO", "message": "outside", "message-origin": "sdk_destination", "account_name": "acme"}
    assert lines[1] == {"level": "WARNING", "message": "inside", "message-origin": "sdk_destination",
                        "account_name": "acme", "schema": "s", "table": "t"}


def test_settings_read_the_operability_options() -> None:
    from destination.runtime.settings import server_options

    options = server_options(root="r", batch_file_format="csv", spark_master="local[1]", metrics_port=9464,
                             spark_ui_port=4040, environ={"RECORDS_DESTINATION_PROGRESS_INTERVAL": "0.5",
                                                          "RECORDS_DESTINATION_METRICS_TABLES": "7",
                                                          "RECORDS_DESTINATION_STATUS_REFRESH": "60",
                                                          "FIVETRAN_ACCOUNT_NAME": "acme",
                                                          "FIVETRAN_GROUP_NAME": "warehouse",
                                                          "RECORDS_DESTINATION_PORT_FILE": "/tmp/p"})
    assert (options.metrics_port, options.spark_ui_port, options.progress_interval, options.metrics_tables,
            options.status_refresh, options.account_name, options.group_name, options.port_file) == \
        (9464, 4040, 0.5, 7, 60.0, "acme", "warehouse", "/tmp/p")
    defaults = server_options(root="r", batch_file_format="csv", spark_master="local[1]", environ={})
    assert (defaults.metrics_port, defaults.spark_ui_port, defaults.progress_interval) == (None, None, 10.0)


def test_tester_progress_line() -> None:
    running = {"tasks_done": 6, "tasks_total": 24, "files": 3, "files_decoded": 2, "mb_per_second": 12.5,
               "seconds_left": 30.2}
    assert render("WriteBatch", "t (9 rows)", 12.4, running, bar=True) == (
        "WriteBatch t (9 rows): 12s [######------------------] Spark tasks 6/24, files 2/3, 12.5 MB/s, ~30s left")
    assert render("WriteBatch", "t", 3.0, running, bar=False) == \
        "WriteBatch t: 3s Spark tasks 6/24, files 2/3, 12.5 MB/s, ~30s left"
    assert render("Migrate", "t (drop)", 1.0, None, bar=True) == "Migrate t (drop): 1s"


def test_tester_prints_plain_lines_when_not_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import destination.tester.display as tester_progress

    monkeypatch.setattr(tester_progress, "PLAIN_EVERY", 0.05)
    out = io.StringIO()
    with CallProgress(out, False, None, "s", poll_seconds=0.01).call("WriteBatch", "t (5 rows)"):
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert lines and "\r" not in out.getvalue()
    assert all(line.startswith("     WriteBatch t (5 rows): ") for line in lines)
