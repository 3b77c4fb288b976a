#!/usr/bin/env python3
"""A kill run's trace, drawn by `ringfence timeline --html` and checked in a real browser.

    timeline_html_test.py RINGFENCE TRAIN_MLP OUT_DIR

`ringfence run -n 3 --trace T --inject kill:rank=1:step=20 -- train_mlp ...` at default
settings; then `ringfence timeline --html OUT_DIR/timeline.html T`, loaded in headless
Chromium, which takes a screenshot (OUT_DIR/timeline.png, the picture in docs/img/) and
dumps the DOM after the page's script ran. In that DOM:
  * slot 1's first incarnation has the injected fault at step 20 and an exit status of -9,
    its track ends there (nothing after the kill), and incarnation 1 starts after it;
  * the survivors abort generation 1, the replacement receives the state (transfer in
    generation 2), and every member of generation 2 redoes step 20;
  * the coordinator's track has the revocation and the recovery.
The page must load nothing from anywhere (no URL but the SVG namespace).
Chromium missing is a failure that says to run scripts/setup (it installs Debian's
chromium), never a silent pass. Every child process has a deadline and is reaped
(rf_testlib.run kills its whole session on expiry).
"""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rf_testlib  # noqa: E402
from rf_testlib import check, wait_session  # noqa: E402

# Below the ctest TIMEOUT (240 s) together, so a hang ends here with its log, not killed by ctest.
JOB_DEADLINE_S = 100
RENDER_DEADLINE_S = 30
BROWSER_DEADLINE_S = 45
KILLED_SLOT, KILL_STEP = 1, 20


class Dom(html.parser.HTMLParser):
    """Tracks (g.track) and what they hold (rect.span, g.instant), by their data-* attributes."""

    def __init__(self):
        super().__init__()
        self.tracks = []
        self.stack = []  # the open <g> elements: a track's dict or None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "g":
            if "track" in classes:
                self.tracks.append({"attrs": a, "spans": [], "instants": []})
                self.stack.append(self.tracks[-1])
            else:
                self.stack.append(None)
                if "instant" in classes and self.current():
                    self.current()["instants"].append(a)
        elif tag == "rect" and "span" in classes and self.current():
            self.current()["spans"].append(a)

    def handle_endtag(self, tag):
        if tag == "g" and self.stack:
            self.stack.pop()

    def current(self):
        for t in reversed(self.stack):
            if t is not None:
                return t
        return None


def track(dom, kind, slot=None, incarnation=None):
    for t in dom.tracks:
        a = t["attrs"]
        if a.get("data-kind") != kind:
            continue
        if slot is not None and a.get("data-slot") != str(slot):
            continue
        if incarnation is not None and a.get("data-incarnation") != str(incarnation):
            continue
        return t
    return None


def named(items, name, **want):
    return [x for x in items
            if x.get("data-name") == name and all(x.get("data-" + k) == str(v) for k, v in want.items())]


def run_stdout(cmd, out_path, err_path, deadline_s):
    """As rf_testlib.run, with stdout to out_path apart from stderr (--dump-dom's DOM)."""
    with open(out_path, "w") as out, open(err_path, "w") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, start_new_session=True)
        return wait_session(p, deadline_s)


def chromium():
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def main():
    ringfence, train_mlp, out_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    browser = chromium()
    if not browser:
        print("FAIL: chromium is not installed; run scripts/setup (it installs Debian's chromium package)")
        sys.exit(1)
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="rf_timeline_")
    trace = os.path.join(out_dir, "trace.json")
    page = os.path.join(out_dir, "timeline.html")
    shot = os.path.join(out_dir, "timeline.png")
    for p in (trace, page, shot):
        if os.path.exists(p):
            os.remove(p)
    try:
        rc, out = rf_testlib.run(
            [ringfence, "run", "-n", "3", "--quiet", "--trace", trace, "--summary", f"{tmp}/summary.json",
             "--inject", f"kill:rank={KILLED_SLOT}:step={KILL_STEP}", "--", train_mlp, "--synthetic", "2048",
             "--batch", "64", "--epochs", "3", "--max-steps", "40", "--log-interval", "0"],
            f"{tmp}/job.txt", JOB_DEADLINE_S)
        check(rc == 0, f"the job: exit {rc}: {out[-2000:]}")
        check(re.search(r"^ringfence info run: trace written to .*trace\.json", out, re.M) is not None,
              f"the launcher did not say where the trace is: {out[-800:]}")
        try:
            with open(trace) as f:
                doc = json.load(f)
            names = {e["name"] for e in doc["traceEvents"]}
        except (OSError, ValueError, KeyError) as e:
            check(False, f"the trace is not a Chrome trace: {e}")
            return
        check({"process_name", "thread_name", "forward", "backward", "allreduce", "optimizer", "abort", "report",
               "plan", "connect", "transfer", "verify", "resume", "redo", "revoke"} <= names,
              f"the trace lacks events: it has {sorted(names)}")
        check(not os.path.exists(trace + ".parts"), "the per-worker parts were left behind")

        rc, out = rf_testlib.run([ringfence, "timeline", "--html", page, trace], f"{tmp}/html.txt", RENDER_DEADLINE_S)
        check(rc == 0, f"timeline --html: exit {rc}: {out}")
        with open(page) as f:
            text = f.read()
        urls = set(re.findall(r"(?:https?|ftp)://[^\"' )]+", text)) - {"http://www.w3.org/2000/svg"}
        check(not urls, f"the page names external resources: {sorted(urls)}")
        check(re.search(r"<(?:link|img|iframe)\b|\bsrc=", text) is None, "the page loads a resource")

        profile = os.path.join(tmp, "chromium-profile")
        base = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                f"--user-data-dir={profile}", "--window-size=1800,470"]
        rc, out = rf_testlib.run([*base, f"--screenshot={shot}", "file://" + page], f"{tmp}/shot.txt",
                                 BROWSER_DEADLINE_S)
        check(rc == 0 and os.path.exists(shot), f"chromium --screenshot: exit {rc}: {out[-1500:]}")
        if os.path.exists(shot):
            with open(shot, "rb") as f:
                png = f.read()
            check(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000,
                  f"the screenshot is no picture ({len(png)} bytes)")
        dom_file = os.path.join(tmp, "dom.html")
        rc = run_stdout([*base, "--dump-dom", "file://" + page], dom_file, f"{tmp}/dom.txt", BROWSER_DEADLINE_S)
        check(rc == 0, f"chromium --dump-dom: exit {rc}")
        dom = Dom()
        with open(dom_file) as f:
            dom.feed(f.read())
        check_dom(dom)
    finally:
        rf_testlib.keep_or_remove(tmp, f"; the page is {page}")
    rf_testlib.exit_on_failures(f"the kill run's timeline in Chromium: the dead rank's track ends at step {KILL_STEP}, abort, transfer "
          f"and the redone step are there; screenshot {shot}")


def check_dom(dom):
    check(len(dom.tracks) >= 5, f"{len(dom.tracks)} tracks in the DOM")
    dead = track(dom, "train", KILLED_SLOT, 0)
    repl = track(dom, "train", KILLED_SLOT, 1)
    survivors = [track(dom, "train", s, 0) for s in (0, 2)]
    coord = track(dom, "coordinator")
    if not (dead and repl and all(survivors) and coord):
        check(False, f"missing tracks: dead {bool(dead)} replacement {bool(repl)} survivors "
                     f"{[bool(s) for s in survivors]} coordinator {bool(coord)}")
        return
    # The dead rank's track ends: killed (-9) at the injected step, nothing after the kill.
    check(dead["attrs"].get("data-exit-status") == "-9",
          f"slot {KILLED_SLOT} incarnation 0 exit status {dead['attrs'].get('data-exit-status')}, expected -9")
    inject = named(dead["instants"], "inject", step=KILL_STEP)
    check(len(inject) == 1, f"the injected fault on the dead track: {inject}")
    dead_end = int(dead["attrs"]["data-last-us"])
    steps = [int(s["data-step"]) for s in dead["spans"] if s.get("data-name") == "step"]
    check(steps and max(steps) == KILL_STEP - 1, f"the dead track's last applied step {max(steps or [-1])}")
    check(int(repl["attrs"]["data-first-us"]) >= dead_end - 1000,
          "the replacement's track begins before the dead one ended")
    # Abort on the survivors (generation 1), the state transfer to the replacement
    # (generation 2), and the redone step on every member of generation 2, after the abort.
    for s in survivors:
        label = f"slot {s['attrs']['data-slot']}"
        aborts = named(s["spans"], "abort", g=1)
        check(len(aborts) == 1, f"{label}: abort spans of generation 1: {aborts}")
        check(len(named(s["spans"], "failed step", step=KILL_STEP)) == 1, f"{label}: no failed step {KILL_STEP}")
        redo = named(s["spans"], "redo", step=KILL_STEP, g=2)
        check(len(redo) == 1, f"{label}: redo of step {KILL_STEP} in generation 2: {redo}")
        if aborts and redo:
            check(int(redo[0]["data-ts-us"]) > int(aborts[0]["data-ts-us"]), f"{label}: the redo before the abort")
        check(int(s["attrs"]["data-last-us"]) > dead_end, f"{label}: the survivor's track ends before the dead one")
    check(len(named(repl["spans"], "transfer", g=2)) == 1, "the replacement has no transfer in generation 2")
    check(len(named(repl["spans"], "redo", step=KILL_STEP, g=2)) == 1, f"the replacement does not redo {KILL_STEP}")
    check(len(named(coord["instants"], "revoke", g=2)) == 1, "the coordinator's track has no revocation to g 2")
    check(len(named(coord["spans"], "recovery", g=2)) == 1, "the coordinator's track has no recovery span")


if __name__ == "__main__":
    main()
