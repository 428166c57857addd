"""Look at a retrain run the way a person does: in the Prefect UI, in a real (headless) browser.

    python bench/ui_screenshots.py [--out ui-screenshots/]

Starts `prefect server start` on a free localhost port (its own PREFECT_HOME), runs
`toolgrpo run --preset smoke` and a failing `toolgrpo validate` against it, then opens in headless
Chromium (`apt-get install chromium`) the retrain flow run's page, its Artifacts tab, the
headline and report artifacts, and the failed data-quality run; then serves the deployments and
submits the nightly retrain's Custom run form with grpo ▸ max_steps = 5 (the run must train 5
GRPO steps), fails a data-quality deployment run and follows the link of its notification (a
loopback webhook) to the run's page (`--no-deployments` skips this); then does what on call
does to runs that train (`--no-on-call` skips it): Suspend then Cancel, the same config again
(it must resume), two runs of one config at once (one must reuse the other's models) and `serve`
killed mid-run (the run must end Crashed). It saves a PNG of each,
prints what each page shows (its <img> elements loaded or not, the text it must contain) and
exits 1 when an image did not load or a page lacks its text. The browser is driven over the
DevTools protocol with `websockets` (a Prefect dependency).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cyclopts
from prefect.client.schemas.filters import FlowFilter, FlowFilterName
from prefect.client.schemas.sorting import FlowRunSort
from websockets.sync.client import ClientConnection, connect

BIN = Path(sys.executable).parent
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
PAGE_TIMEOUT_S = 60.0
WINDOW = (1400, 1800)
# Every <img> on the page, and whether the browser decoded it.
IMAGES_JS = (
    "Array.from(document.images).map(i => ({src: i.src.slice(0, 40), loaded: i.complete && "
    "i.naturalWidth > 0, width: i.naturalWidth, height: i.naturalHeight}))"
)


def chromium_path() -> str | None:
    """The headless-capable browser on this machine, if any."""
    return next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_healthy(url: str, server: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"prefect server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"prefect server not healthy after {timeout_s}s")


@contextlib.contextmanager
def prefect_server(home: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A real `prefect server start` on a free loopback port with its own PREFECT_HOME: yields
    its API URL and the environment that points a command at it; stops it on exit."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_API_URL": url,  # the UI's own calls; it assumes port 4200 otherwise
    }
    env.pop("PREFECT_API_URL", None)
    home.mkdir(parents=True, exist_ok=True)
    with (home / "server.log").open("w") as log:
        server = subprocess.Popen(
            [BIN / "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            _wait_healthy(url, server)
            yield url, {**env, "PREFECT_API_URL": url}
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)


class Page:
    """One browser tab driven over the DevTools protocol."""

    def __init__(self, socket_: ClientConnection) -> None:
        self._socket = socket_
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events arriving meanwhile are skipped)."""
        call_id = next(self._ids)
        self._socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=PAGE_TIMEOUT_S))
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def open(self, url: str, ready_js: str) -> None:
        """Go to `url` and wait until it is ready (see `wait_until`)."""
        self.call("Page.navigate", url=url)
        self.wait_until(ready_js)

    def wait_until(self, ready_js: str) -> None:
        """Wait until `ready_js` is true (the single-page app has rendered) and every image has
        finished loading or failing; raises TimeoutError after `PAGE_TIMEOUT_S`."""
        deadline = time.monotonic() + PAGE_TIMEOUT_S
        settled = f"({ready_js}) && Array.from(document.images).every(i => i.complete)"
        while not self.evaluate(settled):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not rendered after {PAGE_TIMEOUT_S:.0f}s: {ready_js}")
            time.sleep(0.5)
        time.sleep(1.0)  # let the last layout pass finish

    def click(self, text: str) -> None:
        """Click the tab (or button) whose text is `text`, and let the page render."""
        # The innermost element showing exactly `text` (the UI's tabs are not all buttons).
        found = self.evaluate(
            f"(() => {{ const all = Array.from(document.querySelectorAll('body *')).filter("
            f"e => e.textContent.trim() === {json.dumps(text)}); const e = all[all.length - 1];"
            f" if (e) e.click(); return !!e; }})()"
        )
        if not found:
            raise LookupError(f"nothing to click named {text!r}")
        time.sleep(2.0)

    def fill(self, label: str, value: str) -> None:
        """Type `value` into the form field whose label starts with `label` (the first one)."""
        found = self.evaluate(
            f"(() => {{ const label = Array.from(document.querySelectorAll("
            f"'.schema-form-property__label')).find(e => e.textContent.trim().startsWith("
            f"{json.dumps(label)})); if (!label) return false; const box = label.closest("
            f"'.schema-form-property'); const input = box.querySelector('input'); "
            f"Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set.call("
            f"input, {json.dumps(value)}); input.dispatchEvent(new Event('input', "
            f"{{bubbles: true}})); box.scrollIntoView(); return true; }})()"
        )
        if not found:
            raise LookupError(f"no form field labelled {label!r}")
        time.sleep(1.0)

    def scroll_to(self, selector: str) -> None:
        """Scroll the first element matching the CSS `selector` to the top of the window."""
        self.evaluate(f"document.querySelector({json.dumps(selector)})?.scrollIntoView()")
        time.sleep(1.0)

    def scroll_to_text(self, text: str) -> None:
        """Scroll the innermost element showing `text` (its last occurrence: the latest log
        line) to the middle of the window."""
        self.evaluate(
            "Array.from(document.querySelectorAll('body *')).filter(e => e.children.length === 0"
            f" && e.textContent.includes({json.dumps(text)})).pop()"
            "?.scrollIntoView({block: 'center'})"
        )
        time.sleep(1.0)

    def screenshot(self, path: Path) -> Path:
        """A PNG of the window (the UI scrolls inside it, so that is what a person sees)."""
        data = self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(data["data"]))
        return path


@contextlib.contextmanager
def browser(profile: Path) -> Iterator[Page]:
    """Headless Chromium with one tab, on a DevTools port of its own."""
    path = chromium_path()
    if path is None:
        raise FileNotFoundError("no Chromium: apt-get install chromium")
    process = subprocess.Popen(
        [
            path,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        for line in process.stderr:
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            if found:
                break
        else:
            raise RuntimeError("Chromium exited before opening its DevTools port")
        port = found.group(1).split(":")[2].split("/")[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as listing:
            tab = next(t for t in json.load(listing) if t["type"] == "page")
        with connect(tab["webSocketDebuggerUrl"], max_size=None) as socket_:
            page = Page(socket_)
            page.call("Page.enable")
            page.call(
                "Emulation.setDeviceMetricsOverride",
                width=WINDOW[0],
                height=WINDOW[1],
                deviceScaleFactor=1,
                mobile=False,
            )
            yield page
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


@dataclass(frozen=True)
class PageSpec:
    """A page to look at: where, the texts it must show in this order, the tab to open first,
    and what to scroll to before the screenshot (a CSS selector, or a text it shows)."""

    name: str
    url: str
    expected: tuple[str, ...]
    tab: str | None = None
    scroll_to: str | None = None
    scroll_to_text: str | None = None


@dataclass
class PageCheck:
    """What a page showed: its screenshot, its images, and the expected texts it lacked."""

    spec: PageSpec
    screenshot: Path
    images: list[dict[str, Any]]
    missing_text: list[str]

    @property
    def ok(self) -> bool:
        return all(image["loaded"] for image in self.images) and not self.missing_text

    def line(self) -> str:
        loaded = sum(image["loaded"] for image in self.images)
        sizes = ", ".join(f"{i['width']}x{i['height']}" for i in self.images if i["loaded"])
        missing = f"; MISSING (in order) {self.missing_text}" if self.missing_text else ""
        return (
            f"{'ok  ' if self.ok else 'FAIL'} {self.spec.name}: {loaded}/{len(self.images)} <img> "
            f"loaded{f' ({sizes})' if sizes else ''}{missing} — {self.screenshot}"
        )


def missing_in_order(text: str, expected: tuple[str, ...]) -> list[str]:
    """The `expected` texts not found in `text` after the ones before them."""
    missing, position = [], 0
    for wanted in expected:
        found = text.find(wanted, position)
        if found < 0:
            missing.append(wanted)
        else:
            position = found + len(wanted)
    return missing


def check_page(page: Page, spec: PageSpec, out_dir: Path) -> PageCheck:
    """Open the page (and its tab), wait for its texts (or time out), scroll, screenshot, and
    list its images."""
    wanted = json.dumps(list(spec.expected))
    ready = f"{wanted}.every(t => document.body && document.body.innerText.includes(t))"
    with contextlib.suppress(TimeoutError):
        if spec.tab is None:
            page.open(spec.url, ready)
        else:
            page.open(spec.url, f"document.body.innerText.includes({json.dumps(spec.tab)})")
            page.click(spec.tab)
            page.wait_until(ready)
    if spec.scroll_to is not None:
        page.scroll_to(spec.scroll_to)
    if spec.scroll_to_text is not None:
        page.scroll_to_text(spec.scroll_to_text)
    text = page.evaluate("document.body ? document.body.innerText : ''") or ""
    shot = page.screenshot(out_dir / f"{spec.name}.png")
    images = page.evaluate(IMAGES_JS) or []
    return PageCheck(spec, shot, images, missing_in_order(text, spec.expected))


def check_ui(
    ui_url: str, retrain_run: Any, artifacts: dict[str, Any], failed_run: Any, out_dir: Path
) -> list[PageCheck]:
    """Screenshot and check the pages a person reads after a smoke retrain and a failed
    data-quality run (flow runs and artifacts as the Prefect client reads them)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    run_page = f"{ui_url}/runs/flow-run/{retrain_run.id}"
    report = f"{ui_url}/artifacts/artifact/{artifacts['retrain-report'].id}"
    pages = [
        PageSpec("flow-run", run_page, (retrain_run.name, "preset:smoke", "Completed", "sft step")),
        PageSpec(
            "flow-run-task-runs",
            run_page,
            ("report", "mine", "audit · train", "evaluate grpo · eval", "evaluate sft · eval"),
            tab="Task Runs",
        ),
        PageSpec(
            "flow-run-artifacts",
            run_page,
            ("Flow run", "retrain-headline", "Task runs", "retrain-report"),
            tab="Artifacts",
        ),
        PageSpec(
            "headline-artifact",
            f"{ui_url}/artifacts/artifact/{artifacts['retrain-headline'].id}",
            ("Retrain", "eval/multistep", "Zero std", "Full report"),
        ),
        PageSpec("report-artifact", report, ("Tool accuracy before and after GRPO", "Plots")),
        PageSpec(
            "report-artifact-plots",
            report,
            ("Plots", "Confusion matrix after GRPO", "Review queue"),
            scroll_to='img[alt="accuracy by slice"]',
        ),
        PageSpec(
            "failed-data-quality-run",
            f"{ui_url}/runs/flow-run/{failed_run.id}",
            (failed_run.name, "Failed", "[check: ", "data gate failed"),
        ),
    ]
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile, browser(Path(profile)) as page:
        return [check_page(page, spec, out_dir) for spec in pages]


# What the Custom run form sends: the one field filled in (see `check_deployments`).
FORM_MAX_STEPS = 5
NOTIFICATION_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 1200.0


@contextlib.contextmanager
def webhook_receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """An HTTP server on loopback keeping the JSON body of every POST: its URL and the bodies."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    received: list[dict[str, Any]] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            received.append(json.loads(self.rfile.read(length) or b"{}"))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}/hook", received
    finally:
        httpd.shutdown()


def _final_task_run(client: Any, flow_run: Any, name: str) -> Any:
    """The flow run's task run `name` once it is final, else None."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    of_run = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id]))
    runs = [r for r in client.read_task_runs(flow_run_filter=of_run) if r.name == name]
    return runs[0] if runs and runs[0].state.is_final() else None


def _wait_for(what: str, found: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (result := found()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout_s:.0f}s")
        time.sleep(2.0)
    return result


def check_deployments(
    url: str, env: dict[str, str], work: Path, out_dir: Path, on_call: bool = True
) -> list[PageCheck]:
    """What an on-call engineer does with the served deployments: a Custom run of the nightly
    retrain from its form with grpo ▸ max_steps = 5 (it must train 5 GRPO steps), a failed
    data-quality deployment run (one clean screen: a red gate task, no engine traceback) and the
    failure notification (a loopback webhook; its link must open the run); then, with `on_call`,
    `check_on_call`."""
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from toolgrpo.flows.deployments import DATA_QUALITY_DEPLOYMENT, RETRAIN_DEPLOYMENT

    ui_url = url.removesuffix("/api")
    bad = work / "bad-deployment.jsonl"
    bad.write_text("{\n", encoding="utf-8")
    serve_log = (work / "serve.log").open("w")
    serving = subprocess.Popen(
        [BIN / "toolgrpo", "serve", "--preset", "smoke", "--out", work / "runs"],
        env=env,
        stdout=serve_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    checks: list[PageCheck] = []
    try:
        with (
            webhook_receiver() as (hook, received),
            temporary_settings({PREFECT_API_URL: url}),
            get_client(sync_client=True) as client,
        ):
            CustomWebhookNotificationBlock(
                name="ui-check", url=hook, json_data={"text": "{{body}}"}
            ).save("ui-check", overwrite=True)
            notify = _run(
                [BIN / "toolgrpo", "notify-on-failure", "--block", "custom-webhook/ui-check"], env
            )
            if notify.returncode != 0:
                raise RuntimeError(f"notify-on-failure: {notify.stderr}")
            deployments = _wait_for(
                "served deployments",
                lambda: (
                    {d.name: d for d in client.read_deployments()}
                    if len(client.read_deployments()) == 2
                    else None
                ),
                180,
            )
            retrain_id = deployments[RETRAIN_DEPLOYMENT].id
            with (
                tempfile.TemporaryDirectory(prefix="chromium-") as profile,
                browser(Path(profile)) as page,
            ):
                form = PageSpec(
                    "custom-run-form",
                    f"{ui_url}/deployments/deployment/{retrain_id}/run",
                    ("config", "TrainConfigOverrides"),
                )
                page.open(form.url, "document.body.innerText.includes('TrainConfigOverrides')")
                page.click("TrainConfigOverrides")
                page.fill("Max Steps", str(FORM_MAX_STEPS))
                shot = page.screenshot(out_dir / f"{form.name}.png")
                checks.append(PageCheck(form, shot, [], []))
                page.click("Submit")
                custom = _wait_for(
                    "flow run from the form",
                    lambda: next(
                        (r for r in client.read_flow_runs() if r.deployment_id == retrain_id), None
                    ),
                    60,
                )
                custom = _wait_for(
                    "finished custom run",
                    lambda: (r := client.read_flow_run(custom.id)).state.is_final() and r,
                    RUN_TIMEOUT_S,
                )
                config = custom.parameters.get("config")
                metrics = sorted((work / "runs").glob("*-retrain-smoke-*/grpo/train_metrics.jsonl"))
                steps = (
                    max(
                        (
                            json.loads(line).get("step", 0)
                            for line in metrics[-1].read_text().splitlines()
                        ),
                        default=0,
                    )
                    if metrics
                    else 0
                )
                checks.append(
                    check_page(
                        page,
                        PageSpec(
                            "custom-run",
                            f"{ui_url}/runs/flow-run/{custom.id}",
                            (
                                custom.name,
                                "Completed",
                                f"grpo step {FORM_MAX_STEPS}/{FORM_MAX_STEPS}",
                            ),
                        ),
                        out_dir,
                    )
                )
                print(
                    f"custom run from the form: {custom.state.name}, config {config}, "
                    f"{steps} GRPO steps"
                )

                quality_id = deployments[DATA_QUALITY_DEPLOYMENT].id
                failed = client.create_flow_run_from_deployment(
                    quality_id, parameters={"files": [str(bad)]}
                )
                failed = _wait_for(
                    "failed data-quality run",
                    lambda: (r := client.read_flow_run(failed.id)).state.is_final() and r,
                    RUN_TIMEOUT_S,
                )
                notification = _wait_for(
                    "notification", lambda: received and received[0], NOTIFICATION_TIMEOUT_S
                )
                link = notification["text"].splitlines()[-1]
                print(f"notification: {notification['text']!r}")
                run_page = f"{ui_url}/runs/flow-run/{failed.id}"
                checks.append(
                    check_page(
                        page,
                        PageSpec(
                            "notification-link", link, (failed.name, "Failed", "gate verdict")
                        ),
                        out_dir,
                    )
                )
                checks.append(
                    check_page(
                        page,
                        PageSpec(
                            "failed-deployment-run",
                            run_page,
                            (failed.name, DATA_QUALITY_DEPLOYMENT, "[check: ", "data gate failed"),
                        ),
                        out_dir,
                    )
                )
                checks.append(
                    check_page(
                        page,
                        PageSpec(
                            "failed-deployment-run-artifacts",
                            run_page,
                            ("Flow run", "data-gate-verdict", "Task runs"),
                            tab="Artifacts",
                        ),
                        out_dir,
                    )
                )
                logs = page.evaluate("document.body.innerText") or ""
                if link != run_page or steps != FORM_MAX_STEPS or "Engine execution" in logs:
                    raise RuntimeError(
                        f"link {link!r} (expected {run_page!r}), {steps} GRPO steps (expected "
                        f"{FORM_MAX_STEPS}), engine traceback logged: {'Engine execution' in logs}"
                    )
                if on_call:
                    checks += check_on_call(
                        client, page, ui_url, retrain_id, serving, work / "runs", out_dir
                    )
    finally:
        if serving.poll() is None:
            os.killpg(serving.pid, signal.SIGTERM)
            serving.wait(timeout=60)
        serve_log.close()
    return checks


def _trainers(runs: Path) -> int:
    """How many training processes write under `runs`."""
    count = 0
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            count += proc.name.isdigit() and "toolgrpo.training" in command and str(runs) in command
    return count


def _last_step(folder: Path, stage: str) -> int:
    """The last step `stage` logged in the run folder `folder` (0: none yet)."""
    metrics = folder / stage / "train_metrics.jsonl"
    if not metrics.exists():
        return 0
    lines = metrics.read_text(encoding="utf-8").splitlines()
    return max((json.loads(line).get("step", 0) for line in lines if line.strip()), default=0)


def _headline(client: Any, flow_run_id: Any) -> Any:
    """A retrain run's headline artifact."""
    from prefect.client.schemas.filters import ArtifactFilter, FlowRunFilter

    (headline,) = client.read_artifacts(
        artifact_filter=ArtifactFilter(key={"any_": ["retrain-headline"]}),
        flow_run_filter=FlowRunFilter(id={"any_": [flow_run_id]}),
    )
    return headline


# A Custom run's config for the on-call checks: enough GRPO steps to act on while it trains.
ON_CALL_GRPO_STEPS = 40
STOP_AFTER_STEP = 8  # two checkpoints in (smoke saves every 4 steps)


def check_on_call(
    client: Any,
    page: Page,
    ui_url: str,
    retrain_id: Any,
    serving: subprocess.Popen,
    runs: Path,
    out_dir: Path,
) -> list[PageCheck]:
    """What on-call does to runs of the served nightly retrain, and what the UI then says:
    Suspend during GRPO (refused, training goes on), then Cancel (the trainer gone, the run and
    its grpo stage Cancelled, saying where training stopped); the same config again (it resumes
    from the checkpoint and says so); two runs of one config at once (the second waits and
    reuses the first's models); `serve` killed while a run trains (the run ends Crashed). Ends
    with `serving` killed."""
    from prefect.client.schemas.filters import LogFilter
    from prefect.states import Cancelling, Suspended

    def submit(config: dict[str, Any]) -> Any:
        return client.create_flow_run_from_deployment(retrain_id, parameters={"config": config})

    def final(flow_run: Any, timeout_s: float = RUN_TIMEOUT_S) -> Any:
        return _wait_for(
            f"end of {flow_run.name}",
            lambda: (r := client.read_flow_run(flow_run.id)).state.is_final() and r,
            timeout_s,
        )

    def folder_of(before: set[Path]) -> Path:
        return _wait_for(
            "a new run folder",
            lambda: next(iter(set(runs.glob("*-retrain-*")) - before), None),
            120,
        )

    def run_page(name: str, flow_run: Any, *expected: str, scroll_to: str | None = None) -> Any:
        named = client.read_flow_run(flow_run.id).name  # a run is renamed once it starts
        url = f"{ui_url}/runs/flow-run/{flow_run.id}"
        return check_page(
            page, PageSpec(name, url, (named, *expected), None, None, scroll_to), out_dir
        )

    def logged(flow_run: Any, text: str) -> str | None:
        """The run's last log line holding `text`, as the Logs tab shows it."""
        logs = client.read_logs(LogFilter(flow_run_id={"any_": [flow_run.id]}))
        return next((log.message for log in reversed(logs) if text in log.message), None)

    checks, problems = [], []
    config = {"grpo": {"max_steps": ON_CALL_GRPO_STEPS}, "seed": 21}
    before = set(runs.glob("*-retrain-*"))
    suspended = submit(config)
    folder = folder_of(before)
    _wait_for("GRPO steps", lambda: _last_step(folder, "grpo") >= STOP_AFTER_STEP, RUN_TIMEOUT_S)
    client.set_flow_run_state(suspended.id, Suspended(timeout_seconds=600), force=True)
    _wait_for(
        "the Suspend refused",
        lambda: (
            client.read_flow_run(suspended.id).state.is_running()
            and "refused" in (client.read_flow_run(suspended.id).state.message or "")
        ),
        60,
    )
    checks.append(run_page("suspend-refused", suspended, "Running", "refused", scroll_to="refused"))
    if not _trainers(runs):
        problems.append("training stopped on a refused Suspend")
    stopped_at = _last_step(folder, "grpo")
    cancelled_at = time.monotonic()
    client.set_flow_run_state(suspended.id, Cancelling(), force=True)
    suspended = final(suspended, 120)
    _wait_for("the trainer gone", lambda: not _trainers(runs), 60)
    gone_s = time.monotonic() - cancelled_at
    checks.append(
        run_page(
            "cancelled-after-suspend",
            suspended,
            "Cancelled",
            "training stopped",
            scroll_to="training stopped",
        )
    )
    checks.append(
        check_page(
            page,
            PageSpec(
                "cancelled-task-runs",
                f"{ui_url}/runs/flow-run/{suspended.id}",
                ("grpo", "Cancelled", "sft", "Completed"),
                tab="Task Runs",
            ),
            out_dir,
        )
    )
    said = logged(suspended, "training stopped")
    if "training stopped" not in (suspended.state.message or ""):
        problems.append(f"Cancel after a Suspend: the run says {suspended.state.message!r}")
    # task runs reach the server as events: the stage's final state may lag the run's
    stage = _wait_for("grpo's final state", lambda: _final_task_run(client, suspended, "grpo"), 60)
    if not stage.state.is_cancelled():
        problems.append(f"Cancel after a Suspend: the grpo task run ended {stage.state.name}")
    print(
        f"suspend then cancel at GRPO step {stopped_at}: {suspended.state.name} "
        f"({suspended.state.message!r}); no trainer {gone_s:.0f}s after the Cancel; logged {said!r}"
    )

    resumed = final(submit(config))
    checks.append(
        check_page(
            page,
            PageSpec(
                "resumed-headline",
                f"{ui_url}/artifacts/artifact/{_headline(client, resumed.id).id}",
                ("resumed an interrupted training", "grpo", "resumed from checkpoint"),
            ),
            out_dir,
        )
    )
    print(f"the same config again: {resumed.state.name}")

    twice = {"seed": 22}
    first = submit(twice)
    time.sleep(5)
    second = submit(twice)
    first, second = final(first), final(second)
    # the deployment's concurrency slot goes to either: the other waits, then reuses its models
    headlines = [_headline(client, run.id) for run in (first, second)]
    reused = [h for h in headlines if "cached models reused" in (h.data or "")]
    if len(reused) != 1:
        problems.append(f"two runs of one config: {len(reused)} reused the other's models")
    checks.append(run_page("concurrent-first", first, "Completed"))
    checks.append(run_page("concurrent-second", second, "Completed"))
    checks.append(
        check_page(
            page,
            PageSpec(
                "concurrent-reused-headline",
                f"{ui_url}/artifacts/artifact/{(reused or headlines)[0].id}",
                ("cached models reused",),
            ),
            out_dir,
        )
    )
    print(f"two runs of one config 5 s apart: {first.state.name}, {second.state.name}")

    before = set(runs.glob("*-retrain-*"))
    orphaned = submit({"sft": {"num_train_epochs": 400}, "seed": 23})
    folder = folder_of(before)
    _wait_for("SFT steps", lambda: _last_step(folder, "sft") > 0, RUN_TIMEOUT_S)
    os.killpg(serving.pid, signal.SIGKILL)  # the machine gone: nothing of serve reports
    serving.wait(timeout=60)
    killed_at = time.monotonic()
    orphaned = final(orphaned, 300)
    checks.append(run_page("serve-killed", orphaned, "Crashed"))
    if not (orphaned.state.message or "").startswith("no heartbeat"):
        problems.append(f"serve killed: the run ended {orphaned.state!r}, not for no heartbeat")
    print(
        f"serve killed mid-SFT: {orphaned.state.name} {time.monotonic() - killed_at:.0f}s later "
        f"({orphaned.state.message!r})"
    )
    if problems:
        raise RuntimeError("; ".join(problems))
    return checks


def latest_flow_run(client: Any, flow_name: str) -> Any:
    """The newest run of the flow `flow_name` on the server `client` talks to."""
    (flow_run,) = client.read_flow_runs(
        flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])),
        sort=FlowRunSort.START_TIME_DESC,
        limit=1,
    )
    return flow_run


def _run(command: list[str | Path], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)


def main(out: Path = Path("ui-screenshots"), deployments: bool = True, on_call: bool = True) -> int:
    """Run a smoke retrain and a failing validate against a real server; check the UI pages.
    With `deployments` (the default), also serve the deployments and check a Custom run from
    the form, a failed deployment run and its notification (`check_deployments`); with
    `on_call` too, Suspend then Cancel, a resumed run, two runs at once and `serve` killed
    (`check_on_call`)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if chromium_path() is None:
        print("no Chromium on this machine: apt-get install chromium", file=sys.stderr)
        return 2
    # A TERM (a `timeout` running out) unwinds like an error, so the server and browser stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="toolgrpo-ui-") as scratch,
        prefect_server(Path(scratch) / "prefect-home") as (url, env),
    ):
        work = Path(scratch)
        bad = work / "bad.jsonl"
        bad.write_text('{"id": "broken"\n', encoding="utf-8")
        retrain = _run([BIN / "toolgrpo", "run", "--preset", "smoke", "--out", work / "runs"], env)
        validate = _run([BIN / "toolgrpo", "validate", bad, "--out", work / "runs"], env)
        print(f"toolgrpo run --preset smoke: exit {retrain.returncode}")
        if retrain.returncode != 0:
            print(retrain.stderr[-3000:], file=sys.stderr)
            return 1
        print(f"toolgrpo validate (a broken row): exit {validate.returncode}")
        with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
            retrain_run = latest_flow_run(client, "retrain")
            failed_run = latest_flow_run(client, "data-quality")
            artifacts = {
                a.key: a
                for a in client.read_artifacts(
                    flow_run_filter=FlowRunFilter(id={"any_": [retrain_run.id]})
                )
            }
        checks = check_ui(url.removesuffix("/api"), retrain_run, artifacts, failed_run, out)
        if deployments:
            checks += check_deployments(url, env, work, out, on_call)
    for check in checks:
        print(check.line())
    print(f"{time.monotonic() - started:.0f}s in all; screenshots in {out}")
    return 0 if all(check.ok for check in checks) and retrain.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(cyclopts.run(main))
