"""A study reviewed in the MLflow UI as a newcomer meets it, in a real browser.

    .venv/bin/python experiments/mlflow_review.py [--trials 16] [--work DIR] [--reuse]
        [--out experiments/results/mlflow-review]

Tunes the digits example (in-process executor) into a fresh MLflow store (`--reuse`: the
study already in `--work`), starts an MLflow server on it, and walks the path a person takes
who was told only the UI's address: headless Chromium (Debian's `chromium`) with a fresh
profile opens the root URL, clicks the experiment, then the link its description gives to the
trials, the chart view, the study's run and its description. Each step is a real mouse click
(Chrome DevTools Protocol over --remote-debugging-pipe, Python's standard library only), is
checked in the page, and leaves a screenshot. The screenshots and a Markdown page with what
was seen and checked go to `--out`; the exit status is 1 where a check failed.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import platform
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
]
WINDOW = (1600, 1000)
LINK_TO_TRIALS = "every trial with its figures"


def tune(work: Path, trials: int) -> dict[str, Any]:
    request = yaml.safe_load((REPO / "experiments/digits/request.yaml").read_text())
    request["tracking"] = {"uri": f"sqlite:///{work / 'mlflow.db'}", "experiment": "digits"}
    request["storage"] = f"sqlite:///{work / 'study.db'}"
    path = work / "request.yaml"
    path.write_text(yaml.safe_dump(request, sort_keys=False))
    command = [str(REPO / ".venv/bin/autotune"), "tune", str(path), "--trials", str(trials),
               "--executor", "inprocess", "--seed", "0",
               "--out", str(work / "tuned.yaml")]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(command, cwd=work, env=env, check=True)
    return dict(yaml.safe_load((work / "tuned.yaml").read_text()))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve(work: Path, port: int) -> subprocess.Popen[bytes]:
    command = [str(REPO / ".venv/bin/mlflow"), "server", "--host", "127.0.0.1", "--port",
               str(port), "--backend-store-uri", f"sqlite:///{work / 'mlflow.db'}",
               "--workers", "1"]  # fmt: skip
    server = subprocess.Popen(
        command, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return server
        except OSError:
            time.sleep(1)
    server.kill()
    raise RuntimeError("the MLflow server did not answer within 90 s")


# -- a browser driven over the DevTools protocol ------------------------------------------


class Browser:
    """Headless Chromium with a fresh profile, driven over --remote-debugging-pipe: the
    protocol's JSON messages, each ended by a NUL byte, on the browser's file descriptors 3
    (commands in) and 4 (answers and events out)."""

    def __init__(self, chromium: str, size: tuple[int, int] = WINDOW) -> None:
        self.profile = tempfile.mkdtemp(prefix="autotune-review-profile-")
        commands_read, self._commands = os.pipe()
        self._answers, answers_write = os.pipe()

        def on_fds_3_and_4() -> None:  # in the child, before exec
            read = fcntl.fcntl(commands_read, fcntl.F_DUPFD, 10)
            write = fcntl.fcntl(answers_write, fcntl.F_DUPFD, 10)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self.process = subprocess.Popen(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            pass_fds=(3, 4),
            preexec_fn=on_fds_3_and_4,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands_read)
        os.close(answers_write)
        self._buffer = b""
        self._last_id = 0
        self._size = size
        self._session = ""
        self._attach(self._pages()[0])

    def _pages(self) -> list[str]:
        targets = self.call("Target.getTargets")["targetInfos"]
        return [t["targetId"] for t in targets if t["type"] == "page"]

    def _attach(self, target: str) -> None:
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.page("Page.enable")
        self.resize(*self._size)

    def click_into_new_tab(self, selector_js: str, timeout_s: float = 30) -> None:
        """Click a link that opens a new tab (MLflow's descriptions open their links so), and
        go on in that tab."""
        before = set(self._pages())
        self.click(selector_js)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            new = [t for t in self._pages() if t not in before]
            if new:
                self._attach(new[0])
                return
            time.sleep(0.3)
        raise TimeoutError("the link opened no new tab")

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._last_id += 1
        message: dict[str, Any] = {"id": self._last_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for answer in self._messages():
                if answer.get("id") == self._last_id:
                    if "error" in answer:
                        raise RuntimeError(f"{method}: {answer['error']}")
                    return dict(answer.get("result", {}))
        raise TimeoutError(f"{method}: no answer in 60 s")

    def _messages(self) -> list[dict[str, Any]]:
        ready, _, _ = select.select([self._answers], [], [], 0.2)
        if ready:
            data = os.read(self._answers, 1 << 20)
            if not data:
                raise RuntimeError("chromium closed its end of the pipe")
            self._buffer += data
        *complete, self._buffer = self._buffer.split(b"\0")
        return [json.loads(raw) for raw in complete]

    def page(self, method: str, **params: Any) -> dict[str, Any]:
        return self.call(method, session=self._session, **params)

    def resize(self, width: int, height: int) -> None:
        self.page("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)  # fmt: skip

    def js(self, expression: str) -> Any:
        answer = self.page(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression[:80]}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def goto(self, url: str) -> None:
        self.page("Page.navigate", url=url)

    def wait_for(self, expression: str, timeout_s: float = 60, settle_s: float = 3) -> Any:
        """The expression's first truthy value, polled; then a pause for what follows it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                time.sleep(settle_s)
                return value
            time.sleep(0.5)
        raise TimeoutError(f"not seen within {timeout_s:.0f} s: {expression}")

    def click(self, selector_js: str) -> None:
        """A real mouse click (moved, pressed, released) at the middle of the element that
        `selector_js` evaluates to, scrolled into view first."""
        box = self.js(
            f"(() => {{ const e = {selector_js}; e.scrollIntoView({{block: 'center'}});"
            " const r = e.getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.page("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1],
                      button="left", clickCount=1)  # fmt: skip

    def screenshot(self, path: Path) -> None:
        data = self.page("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            self.process.kill()
        self.process.wait(timeout=30)
        for fd in (self._commands, self._answers):
            os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)


def link_with_text(text: str) -> str:
    """JavaScript: the first link whose text is `text`."""
    return f"[...document.querySelectorAll('a')].find(a => a.innerText.trim() === {text!r})"


# -- the walk -----------------------------------------------------------------------------


@dataclass
class Step:
    name: str  # the screenshot's file name
    action: str
    url: str = ""
    seen: list[str] = field(default_factory=list)
    checks: dict[str, bool] = field(default_factory=dict)


def walk(browser: Browser, base: str, tuned: dict[str, Any], out: Path) -> list[Step]:
    study, chosen = tuned["study"]["name"], tuned["study"]["trial_number"]
    baseline = tuned["revalidation"]["baseline_trial"]
    steps = []

    home = Step("home.png", "open the UI's root URL (/) in a fresh profile")
    browser.goto(f"{base}/")
    browser.wait_for(f"{link_with_text('digits')} !== undefined")
    row = browser.js(
        f"(e => (e.closest('[role=\"row\"], tr') || e.parentElement.parentElement.parentElement)"
        f".innerText)({link_with_text('digits')})"
    )
    name, *_, description, _ = str(row).split("\n")
    home.seen.append(f"the experiment's row: {name}, described «{description[:60]}…»")
    steps.append(finish(browser, home, out))

    opened = Step("experiment.png", "click the experiment `digits` in Recent Experiments")
    browser.click(link_with_text("digits"))
    browser.wait_for(f"{link_with_text(LINK_TO_TRIALS)} !== undefined")
    landed = str(browser.js("location.hash"))
    where = "its runs" if "/runs" in landed else "its GenAI overview, not its runs"
    opened.seen.append(f"MLflow opened {where} (`{landed}`)")
    opened.checks["the experiment's description shows the link to the trials"] = True
    steps.append(finish(browser, opened, out))

    table = Step("runs-table.png", f"click «{LINK_TO_TRIALS}» in the experiment's description")
    got_it = "[...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Got it')"
    if browser.js(f"{got_it} !== undefined"):  # MLflow's modal pop-up takes the first click
        table.seen.append(
            "first «Got it» on MLflow's «Detect Issues» pop-up, which blocks the page"
        )
        browser.click(got_it)
        time.sleep(1)
    table.seen.append("the link opens a new tab (MLflow opens a description's links so)")
    browser.click_into_new_tab(link_with_text(LINK_TO_TRIALS))
    browser.wait_for("document.querySelectorAll('.ag-row').length > 3", settle_s=5)
    table_checks(browser, table, chosen, baseline, min(10, int(tuned["study"]["n_trials"])))
    steps.append(finish(browser, table, out))

    charts = Step("runs-charts.png", "click «the trade-off as charts» in the description")
    browser.click_into_new_tab(link_with_text("the trade-off as charts"))
    browser.wait_for("document.querySelectorAll('.js-plotly-plot').length > 0", settle_s=6)
    plots = browser.js("document.querySelectorAll('.js-plotly-plot').length")
    section = browser.js(
        "(e => e ? e.closest('div').innerText : '')([...document.querySelectorAll('span, div')]"
        ".find(e => e.children.length === 0 && e.innerText.startsWith('autotune: the trade-off')))"
    )
    charts.seen.append(f"first chart section «{section}»; {plots} plots drawn in view")
    charts.checks["the trade-off's section comes first, with its scatter charts"] = (
        bool(section)
        and plots >= 3
        and browser.js(
            "document.body.innerText.indexOf('autotune: the trade-off')"
            " < document.body.innerText.indexOf('Model metrics')"
        )
    )
    steps.append(finish(browser, charts, out))

    run = Step("parent-run.png", "click «the study's run», then «Show more»")
    browser.click_into_new_tab(link_with_text("the study's run"))
    browser.wait_for("document.querySelector('.note-editor-preview-content') !== null")
    more = "[...document.querySelectorAll('button, a')].find(e => e.innerText === 'Show more')"
    if browser.js(f"{more} !== undefined"):
        browser.click(more)
        time.sleep(2)
    browser.resize(WINDOW[0], 1700)
    description_checks(browser, run, study)
    steps.append(finish(browser, run, out))
    browser.resize(*WINDOW)

    report = Step("pareto-report.png", "open the artifact pareto/pareto_report.html")
    browser.goto(
        f"{base}/#/experiments/{tuned['mlflow']['experiment_id']}/runs/{tuned['mlflow']['run_id']}"
        "/artifacts/pareto/pareto_report.html?workflowType=machine_learning"
    )
    browser.wait_for("document.querySelector('iframe') !== null", settle_s=6)
    steps.append(finish(browser, report, out))
    return steps


def finish(browser: Browser, step: Step, out: Path) -> Step:
    step.url = str(browser.js("location.hash")) or "/"
    browser.screenshot(out / step.name)
    print(f"{step.name}: {step.url} {step.checks}", flush=True)
    return step


def table_checks(browser: Browser, step: Step, chosen: int, baseline: int, trials: int) -> None:
    """The runs table as the saved view shows it; `trials`: how many trial rows it must list
    (not folded under their parent run)."""
    headers = browser.js(
        "[...document.querySelectorAll('.ag-header-cell[col-id]')]"
        ".sort((a, b) => a.getBoundingClientRect().x - b.getBoundingClientRect().x).map(h => {"
        " const t = h.querySelector('[data-testid^=\"sort-header-\"]');"
        " return [h.getAttribute('col-id'), t ? t.innerText : '',"
        " t ? t.getBoundingClientRect().width > t.parentElement.clientWidth + 1 : false]; })"
    )
    names = browser.js(
        "[...document.querySelectorAll('.ag-row')].sort((a, b) =>"
        " a.getBoundingClientRect().y - b.getBoundingClientRect().y)"
        ".map(r => [...r.querySelectorAll('a')].find(a => a.innerText.startsWith('trial-')"
        " || a.innerText === 'digits-cnn')).filter(Boolean)"
        ".map(a => [a.innerText, a.scrollWidth > a.parentElement.clientWidth + 1])"
    )
    rows = list(dict.fromkeys(name for name, _ in names))
    cut_cells = browser.js(
        "[...document.querySelectorAll('.ag-cell')].filter(c => c.scrollWidth > c.clientWidth + 1"
        " && /^-?[0-9.e+-]+$/.test(c.innerText.trim())).length"
    )
    rounded = [h for h in headers if h[0].startswith("metrics.`rounded/")]
    step.seen += [f"rows, first to last: {', '.join(rows[:8])}{' …' if len(rows) > 8 else ''}"]
    step.seen += [f"metric columns in view: {', '.join(h[1] for h in rounded)}"]
    step.seen += [f"sorted by: {browser.js(SORT_LABEL)}"]
    step.checks["the trials are listed, not folded under their parent"] = len(rows) >= trials
    step.checks["the key figures are columns, rounded"] = len(rounded) >= 3
    step.checks["no metric header is cut"] = not any(h[2] for h in rounded)
    step.checks["no figure is cut"] = cut_cells == 0
    step.checks["no run name is cut"] = not any(cut for _, cut in names)
    step.checks["the chosen trial is marked by name"] = f"trial-{chosen} (chosen" in " ".join(rows)
    step.checks["the baseline is marked by name"] = f"trial-{baseline} (" in " ".join(rows)


SORT_LABEL = (
    "([...document.querySelectorAll('button')].find(b => b.innerText.startsWith('Sort:'))"
    " || {innerText: '?'}).innerText"
)


def description_checks(browser: Browser, step: Step, study: str) -> None:
    blocks = browser.js(
        "[...document.querySelectorAll('.note-editor-preview-content pre')].map(p =>"
        " [p.innerText.split('\\n').length, p.scrollWidth > p.parentElement.clientWidth + 1])"
    )
    text = browser.js("document.querySelector('.note-editor-preview-content').innerText")
    step.seen.append(f"{len(blocks)} fixed-width blocks of figures")
    step.checks["the description shows its study"] = study in text
    step.checks["its figures are fixed-width blocks (columns kept apart)"] = len(blocks) >= 2
    step.checks["no block is wider than the description"] = not any(b[1] for b in blocks)
    step.checks["the head-to-head figures say so"] = "re-measured head to head" in text
    step.checks["the front's figures say they are the search's"] = "figures from the search" in text
    step.checks["the constraints are listed once"] = text.count("max_accuracy_drop") == 1


# -- the page -----------------------------------------------------------------------------


def page(args: argparse.Namespace, tuned: dict[str, Any], steps: list[Step]) -> str:
    lines = [
        "# A study in the MLflow UI, as a newcomer meets it",
        "",
        f"Command: `.venv/bin/python experiments/mlflow_review.py --trials {args.trials}`: the "
        "digits example tuned into a fresh store, an MLflow server on it, then headless "
        f"Chromium ({chromium_version()}) with a fresh profile, driven by real mouse clicks "
        f"over the DevTools protocol; MLflow {mlflow_version()}. Machine: {machine()}.",
        "",
        f"Headline of this run: {tuned['headline']['text']}",
        "",
    ]
    for number, step in enumerate(steps, 1):
        lines += [f"## {number}. {step.action}", "", f"Address then: `{step.url}`", ""]
        lines += [f"- seen: {seen}" for seen in step.seen]
        lines += [f"- {'✔' if ok else '✘'} {check}" for check, ok in step.checks.items()]
        lines += ["", f"![{step.name}]({step.name})", ""]
    return "\n".join(lines) + FINDINGS


FINDINGS = """
## What MLflow 3.17 lets a store set, and what it does not

- MLflow 3.17.2 opens an experiment on the page its *workflow type* chooses, and that type is
  the browser's: the address's `workflowType`, else local storage (`mlflow.workflowType_v1`),
  else GenAI (`main.c2f5f8d4.js`, module 7975, the workflow-type provider). The experiment's
  `mlflow.experimentKind` tag is not read for it: the experiment-kind hook (module 31080)
  returns the kind of the workflow type whenever workflow-based navigation is on, and that
  flag is compiled in as on (module 89511); the redirect from `#/experiments/ID` (chunk 5439,
  module 24546) then goes to the GenAI overview. A newcomer's first click on the experiment
  therefore lands there, with its "Detect Issues" pop-up, whatever the store holds.
- What the store can show there is the experiment's description (`mlflow.note.content`
  on the experiment), which MLflow puts above every page of the experiment: autotune writes
  a line per study with links to the runs table and charts (each with
  `workflowType=machine_learning`) and to the study's run. One click more reaches the runs.
- A fresh runs table shows no metric column and folds child runs under their parent; only a
  saved view (an experiment tag `mlflow.sharedViewState.ID`, opened by its link) sets columns,
  their widths, the sort and the charts. A shared view leaves out pinned, hidden and expanded
  runs, so the chosen trial and the baseline cannot be pinned first: their runs are named
  (`trial-13 (chosen)`) and coloured (the chosen red, the baseline black, the front orange)
  instead, and the view sorts by the rounded metric the selection ranks by.
- MLflow's scatter chart has no log axis; the Pareto report (`pareto/pareto_report.html`) has.
- MLflow's assistant panel takes the right quarter of every page: the UI's own default
  (local storage), not something a store can turn off.

## optuna-dashboard

`optuna-dashboard sqlite:///study.db` (0.21.0, Optuna 5.0.0) on an 8-trial digits study made
after studies began to name their objectives (an earlier run, not made by this script): the
Pareto-front plot offers `accuracy`, `latency_p95_ms` and `energy_per_sample_j` as axes.

![optuna-dashboard.png](optuna-dashboard.png)
"""


def chromium_version() -> str:
    chromium = shutil.which("chromium") or "chromium"
    run = subprocess.run([chromium, "--version"], capture_output=True, text=True)
    return run.stdout.strip() or "version unknown"


def mlflow_version() -> str:
    from importlib.metadata import version

    return version("mlflow")


def machine() -> str:
    run = subprocess.run(["lscpu"], capture_output=True, text=True)
    model = next(
        (line.split(":", 1)[1].strip() for line in run.stdout.splitlines()
         if line.startswith("Model name")),
        platform.processor() or "unknown CPU",
    )  # fmt: skip
    return f"{model}, {os.cpu_count()} cores, no GPU used"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--reuse", action="store_true", help="the study already in --work")
    parser.add_argument("--out", type=Path, default=REPO / "experiments/results/mlflow-review")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs Debian's chromium package (apt-get install chromium)")
    work = args.work or Path(tempfile.mkdtemp(prefix="autotune-review-"))
    work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.reuse:
        tuned = dict(yaml.safe_load((work / "tuned.yaml").read_text()))
    else:
        tuned = tune(work, args.trials)
    port = free_port()
    server = serve(work, port)
    browser = Browser(chromium)
    try:
        steps = walk(browser, f"http://127.0.0.1:{port}", tuned, args.out)
    finally:
        browser.close()
        server.terminate()
        server.wait(timeout=30)
    (args.out / "README.md").write_text(page(args, tuned, steps))
    failed = [check for s in steps for check, ok in s.checks.items() if not ok]
    print(json.dumps({"out": str(args.out), "work": str(work), "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
