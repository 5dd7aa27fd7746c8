#!/usr/bin/env python3
"""The airlock console in a real browser (Debian chromium + chromedriver,
driven by selenium), against a server tests/it/ui_console.rs set up: imported
images (one with an annotation that is an HTML tag), stack `bb` with
promotion 2 at 10 %, stack `xs` of `library/xss` (outside `stacks/`),
users ops (admin), stk (admin limited to `stacks/`), rd (reader), a cell user.

Steps, each failing the run with a message:
 1. 200 cells resolve `bb` through /stacks/v1 and report what they were
    told: the expected count per digest comes from those answers.
 2. As ops: every page loads without console errors; screenshots go to
    $UI_SCREENSHOTS; every form control is labelled; keyboard navigation
    reaches the skip link, the navigation and the forms.
 3. The rollout chart and table show the counts of step 1.
 4. The annotation `<img src=x onerror=alert(1)>` shows as text.
 5. Widen to 50 % and roll back from the page: each confirmation names the
    effect (cells moving, computed here from the documented rollout hash),
    and the change is seen through the CLI (`airlock stack show --json`).
 6. A cross-site POST (a page on another origin) and a POST without the
    CSRF token are refused and change nothing.
 7. As rd: the stacks (they need the cell or admin role, as /stacks/v1
    does) are refused and not in the navigation, no admin action is
    shown, and the forms' endpoints answer 403.
 8. As stk (admin limited to `stacks/`): the pages show only its stack and
    repositories, it sees no form for the others (nor a whole-state
    rollback), and their endpoints answer 403.

Environment: UI_BASE (https://127.0.0.1:PORT), UI_CA (the test CA),
AIRLOCK (the binary), AIRLOCK_DATA (the store), UI_SCREENSHOTS,
UI_ADMIN, UI_READER, UI_PADMIN, UI_CELL (`user:password`).
"""

import hashlib
import http.server
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.support.ui import Select, WebDriverWait

BASE = os.environ["UI_BASE"]
CA = os.environ["UI_CA"]
AIRLOCK = os.environ["AIRLOCK"]
DATA = os.environ["AIRLOCK_DATA"]
SHOTS = os.environ["UI_SCREENSHOTS"]
# When set (UI_DOCS_IMAGES=docs/images), the documentation's screenshots
# are written there too, at a smaller size.
DOCS = os.environ.get("UI_DOCS_IMAGES")
ADMIN = os.environ["UI_ADMIN"].split(":", 1)
READER = os.environ["UI_READER"].split(":", 1)
PADMIN = os.environ["UI_PADMIN"].split(":", 1)
CELL = os.environ["UI_CELL"].split(":", 1)
STACK = "bb"
CELLS = [f"diego-cell/{i:04d}" for i in range(200)]
TLS = ssl.create_default_context(cafile=CA)


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def request(method, path, user=None, body=None, headers=None, cookie=None):
    """(status, headers, body bytes) of one HTTPS request."""
    req = urllib.request.Request(BASE + path, method=method, data=body)
    if user:
        import base64

        token = base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    if cookie:
        req.add_header("Cookie", cookie)
    for k, v in (headers or {}).items():
        req.add_header(k, v)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None

    opener = urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=TLS), NoRedirect
    )
    try:
        with opener.open(req) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def cli(*args):
    out = subprocess.run(
        [AIRLOCK, *args, "--data", DATA], capture_output=True, text=True, check=True
    )
    return out.stdout


def stack_show():
    return json.loads(cli("stack", "show", STACK, "--json"))


def selected(promotion, cell, percent):
    """The rollout rule as documented in src/stacks/rollout.rs: the first 8
    bytes of sha256("airlock-rollout-v1\\0<stack>\\0<promotion>\\0<cell>"),
    big-endian, modulo 10 000, under percent × 100."""
    h = hashlib.sha256(
        b"airlock-rollout-v1\0"
        + STACK.encode()
        + b"\0"
        + str(promotion).encode()
        + b"\0"
        + cell.encode()
    ).digest()
    return int.from_bytes(h[:8], "big") % 10000 < percent * 100


def report_cells():
    """Step 1: each cell asks what to run and reports it; returns digest → cells."""
    counts = {}
    for cell in CELLS:
        q = urllib.parse.quote(cell, safe="")
        st, _, body = request("GET", f"/stacks/v1/{STACK}?cell={q}", user=CELL)
        check(st == 200, f"resolve {cell}: {st} {body[:200]!r}")
        digest = json.loads(body)["digest"]
        st, _, body = request(
            "PUT",
            f"/stacks/v1/{STACK}/cells/{q}",
            user=CELL,
            body=json.dumps({"digest": digest}).encode(),
            headers={"Content-Type": "application/json"},
        )
        check(st == 204, f"report {cell}: {st} {body[:200]!r}")
        counts[digest] = counts.get(digest, 0) + 1
    return counts


def browser():
    o = webdriver.ChromeOptions()
    o.binary_location = "/usr/bin/chromium"
    for flag in [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--ignore-certificate-errors",
        "--window-size=1280,1500",
        "--force-device-scale-factor=1",
        f"--user-data-dir={tempfile.mkdtemp(prefix='ui-chromium-')}",
    ]:
        o.add_argument(flag)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)


def wait_url(d, part, what):
    """Waits (10 s at most) until the page's URL holds `part`: a click
    returns before the navigation it starts has finished."""
    try:
        WebDriverWait(d, 10).until(lambda d: part in d.current_url)
    except TimeoutException:
        main = d.find_elements(By.TAG_NAME, "main")
        fail(f"{what}: {d.current_url}: {main[0].text if main else ''}")


def console_errors(d, where):
    errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    check(not errors, f"{where}: console errors: {errors}")


def login(d, user):
    d.get(BASE + "/ui/")
    check("/ui/login" in d.current_url, f"not sent to the login form: {d.current_url}")
    d.find_element(By.ID, "username").send_keys(user[0])
    d.find_element(By.ID, "password").send_keys(user[1])
    d.find_element(By.CSS_SELECTOR, "form.stack button[type=submit]").click()
    try:
        WebDriverWait(d, 10).until(lambda d: d.current_url.endswith("/ui/"))
    except TimeoutException:
        fail(f"login as {user[0]} failed: {d.current_url}: {d.find_element(By.TAG_NAME, 'main').text}")
    console_errors(d, "login")


def labelled(d, where):
    """Every visible form control has a label (label[for] or aria-label)."""
    for el in d.find_elements(By.CSS_SELECTOR, "input:not([type=hidden]), select, textarea"):
        ident = el.get_attribute("id")
        ok = el.get_attribute("aria-label") or (
            ident and d.find_elements(By.CSS_SELECTOR, f'label[for="{ident}"]')
        )
        check(ok, f"{where}: unlabelled control {el.get_attribute('outerHTML')}")
    for b in d.find_elements(By.TAG_NAME, "button"):
        check(b.text.strip() or b.get_attribute("aria-label"), f"{where}: button without a name")


def visit(d, path, name):
    d.get(BASE + path)
    check(d.title.endswith("· airlock"), f"{path}: title {d.title!r}")
    check(d.find_elements(By.TAG_NAME, "h1"), f"{path}: no heading")
    console_errors(d, path)
    labelled(d, path)
    d.save_screenshot(os.path.join(SHOTS, f"{name}.png"))


def no_alert(d, where):
    try:
        d.switch_to.alert
        fail(f"{where}: a script ran (alert open)")
    except NoAlertPresentException:
        pass


def wait_for_sample(d, total):
    """Reloads the stack page until the sample shows `total` cells."""
    deadline = time.time() + 30
    while time.time() < deadline:
        d.get(f"{BASE}/ui/stacks/{STACK}")
        got = d.find_elements(By.ID, "cells-total")
        if got and got[0].text == str(total):
            return
        time.sleep(0.5)
    fail(f"the stack page never showed {total} cells")


def table_counts(d):
    rows = d.find_elements(By.CSS_SELECTOR, "#cells-now tbody tr")
    return {r.get_attribute("data-digest"): int(r.find_element(By.CSS_SELECTOR, "td.cells").text) for r in rows}


def confirm_effect(d, expect_text):
    effect = d.find_element(By.ID, "effect").text
    check(expect_text in effect, f"confirmation says {effect!r}, not {expect_text!r}")
    console_errors(d, "confirmation")
    labelled(d, "confirmation")
    d.find_element(By.CSS_SELECTOR, "form button.danger").click()
    wait_url(d, "done=", "no confirmation of the change")


def keyboard(d):
    d.get(BASE + "/ui/")
    d.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    check(d.switch_to.active_element.text == "Skip to content", "first Tab: not the skip link")
    for _ in range(20):
        if d.switch_to.active_element.text == "Stacks":
            break
        d.switch_to.active_element.send_keys(Keys.TAB)
    check(d.switch_to.active_element.text == "Stacks", "Tab never reached the Stacks link")
    d.switch_to.active_element.send_keys(Keys.ENTER)
    wait_url(d, "/ui/stacks", "Enter on the Stacks link")
    d.get(f"{BASE}/ui/stacks/{STACK}")
    d.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    for _ in range(120):
        if d.switch_to.active_element.get_attribute("id") == "widen-percent":
            return
        d.switch_to.active_element.send_keys(Keys.TAB)
    fail("Tab never reached the widen form")


def session_cookie(d):
    return "; ".join(f"{c['name']}={c['value']}" for c in d.get_cookies())


def csrf_of(d):
    return d.find_element(By.CSS_SELECTOR, "input[name=csrf]").get_attribute("value")


def post_form(path, fields, cookie, extra=None):
    body = urllib.parse.urlencode(fields).encode()
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    headers.update(extra or {})
    return request("POST", path, body=body, headers=headers, cookie=cookie)


def cross_site(d, before):
    """Step 6: a page of another origin posts to the console; nothing changes."""
    page = f"""<!doctype html><title>evil</title>
<form id="f" method="post" action="{BASE}/ui/stacks/{STACK}/rollout">
<input name="percent" value="100"><input name="confirm" value="yes"></form>
<script>document.getElementById('f').submit()</script>"""

    class Evil(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page.encode())

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Evil)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    d.get(f"http://localhost:{srv.server_port}/")
    time.sleep(1.5)
    srv.shutdown()
    check("done=" not in d.current_url, f"a cross-site POST went through: {d.current_url}")
    check(stack_show()["rollout"] == before, "a cross-site POST changed the rollout")
    d.get(f"{BASE}/ui/stacks/{STACK}")
    d.get_log("browser")  # the evil page's own noise is not the console's
    cookie, token = session_cookie(d), csrf_of(d)
    st, _, body = post_form(f"/ui/stacks/{STACK}/rollout", {"percent": "100", "confirm": "yes"}, cookie)
    check(st == 403 and b"CSRF" in body, f"POST without a CSRF token: {st}")
    st, _, _ = post_form(
        f"/ui/stacks/{STACK}/rollout",
        {"percent": "100", "confirm": "yes", "csrf": token},
        cookie,
        {"Origin": "https://evil.example"},
    )
    check(st == 403, f"POST from another Origin: {st}")
    check(stack_show()["rollout"] == before, "a refused POST changed the rollout")


def denied_page(d, path, who):
    d.get(BASE + path)
    check("DENIED" in d.page_source, f"{who} reads {path}: {d.page_source[:300]}")
    d.get_log("browser")  # the refusal's own 403 (and favicon) is expected


def forms_refused(d, who, cases):
    cookie, token = session_cookie(d), csrf_of(d)
    before = stack_show()["rollout"]
    for path, fields in cases:
        for confirm in [{}, {"confirm": "yes"}]:
            st, _, _ = post_form(path, {**fields, **confirm, "csrf": token}, cookie)
            check(st == 403, f"{who} POST {path} {confirm}: {st}, not 403")
    check(stack_show()["rollout"] == before, f"{who} changed the rollout")


WHOLE_STATE = [("/ui/imports/rollback", {"to": "1"}), ("/ui/operations/revoke", {"user": "x"})]


def reader(expected):
    d = browser()
    try:
        login(d, READER)
        nav = [a.get_attribute("href") for a in d.find_elements(By.CSS_SELECTOR, "nav.main a")]
        check(not any(h.endswith("/ui/stacks") for h in nav), f"a reader's navigation offers stacks: {nav}")
        denied_page(d, f"/ui/stacks/{STACK}", "a reader")
        denied_page(d, "/ui/stacks", "a reader")
        d.get(f"{BASE}/ui/imports")
        console_errors(d, "reader imports page")
        check(not d.find_elements(By.CSS_SELECTOR, "form[action='/ui/imports/rollback']"), "a reader sees rollback")
        forms = [f.get_attribute("action") for f in d.find_elements(By.TAG_NAME, "form")]
        check(all(f.endswith("/ui/logout") for f in forms), f"a reader sees forms {forms}")
        d.save_screenshot(os.path.join(SHOTS, "imports-reader.png"))
        forms_refused(d, "reader", [
            (f"/ui/stacks/{STACK}/rollout", {"percent": "100"}),
            (f"/ui/stacks/{STACK}/rollback", {"reason": "x"}),
            (f"/ui/stacks/{STACK}/state", {"state": "DISABLED"}),
            (f"/ui/stacks/{STACK}/promote", {"image": "stacks/bb:latest", "percent": "10"}),
        ] + WHOLE_STATE)
    finally:
        d.quit()


def padmin(expected):
    d = browser()
    try:
        login(d, PADMIN)
        d.get(f"{BASE}/ui/stacks")
        console_errors(d, "padmin stacks page")
        links = [a.get_attribute("href") for a in d.find_elements(By.CSS_SELECTOR, "main a")]
        check(any(h.endswith(f"/ui/stacks/{STACK}") for h in links), f"stk does not see {STACK}: {links}")
        check(not any(h.endswith("/ui/stacks/xs") for h in links), f"stk sees stack xs: {links}")
        d.save_screenshot(os.path.join(SHOTS, "stacks-padmin.png"))
        d.get(f"{BASE}/ui/stacks/{STACK}")
        console_errors(d, "padmin stack page")
        check(d.find_elements(By.ID, "actions"), "stk sees no actions on its own stack")
        check(table_counts(d) == expected, "stk's chart counts differ")
        candidates = [o.get_attribute("value") for o in d.find_elements(By.CSS_SELECTOR, "#actions option")]
        check(not any("library/" in c for c in candidates), f"stk is offered images outside stacks/: {candidates}")
        d.get(f"{BASE}/ui/repositories")
        text = d.find_element(By.TAG_NAME, "main").text
        check("stacks/bb" in text and "library/xss" not in text, f"stk's repositories: {text!r}")
        d.get(f"{BASE}/ui/imports?all=1")
        check(not d.find_elements(By.CSS_SELECTOR, "form[action='/ui/imports/rollback']"), "stk sees the whole-state rollback")
        check("library/xss" not in d.find_element(By.TAG_NAME, "main").text, "stk's history names library/xss")
        d.get(f"{BASE}/ui/operations")
        check("ops" not in [c.text for c in d.find_elements(By.CSS_SELECTOR, "main td")], "stk sees the users")
        denied_page(d, "/ui/stacks/xs", "stk")
        d.get(f"{BASE}/ui/stacks/{STACK}")
        forms_refused(d, "stk", [
            ("/ui/stacks/xs/rollout", {"percent": "100"}),
            ("/ui/stacks/xs/state", {"state": "DISABLED"}),
            (f"/ui/stacks/{STACK}/promote", {"image": "library/xss:latest", "percent": "10"}),
        ] + WHOLE_STATE)
    finally:
        d.quit()


def main():
    os.makedirs(SHOTS, exist_ok=True)
    expected = report_cells()
    check(len(expected) == 2, f"cells run {len(expected)} digests, not 2 (10 % rollout)")
    new = sum(1 for c in CELLS if selected(2, c, 10))
    check(new in expected.values(), f"the resolve answers disagree with the rollout rule: {expected}, {new}")
    d = browser()
    try:
        login(d, ADMIN)
        wait_for_sample(d, len(CELLS))
        got = table_counts(d)
        check(got == expected, f"chart table {got} != reports {expected}")
        svg = " ".join(t.get_attribute("textContent") for t in d.find_elements(By.CSS_SELECTOR, "svg.chart polygon title"))
        for n in expected.values():
            check(f": {n} cells now" in svg, f"chart bands {svg!r} lack {n} cells")
        check("10 %" in d.find_element(By.ID, "rollout-percent").text, "rollout percentage not shown")
        if DOCS:
            d.set_window_size(1100, 980)
            d.save_screenshot(os.path.join(DOCS, "console-stack.png"))
            d.set_window_size(1280, 1500)
        pages = [
            ("/ui/", "overview"),
            ("/ui/imports", "imports"),
            ("/ui/imports?all=1", "history"),
            ("/ui/repositories", "repositories"),
            ("/ui/repositories/stacks/bb", "repository"),
            ("/ui/repositories/library/xss?tag=latest", "tag"),
            ("/ui/stacks", "stacks"),
            (f"/ui/stacks/{STACK}", "stack"),
            ("/ui/torcx", "torcx"),
            ("/ui/operations", "operations"),
        ]
        for path, name in pages:
            visit(d, path, name)
        # Step 4: attacker-controlled text stays text.
        d.get(BASE + "/ui/repositories/library/xss?tag=latest")
        cells = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#annotations td")]
        check("<img src=x onerror=alert(1)>" in cells, f"annotation not shown as text: {cells}")
        check(not d.find_elements(By.CSS_SELECTOR, "main img"), "an annotation became an element")
        no_alert(d, "tag page")
        d.get(f"{BASE}/ui/stacks/{STACK}")
        check("<img src=x onerror=alert(2)>" in d.page_source.replace("&lt;", "<").replace("&gt;", ">"), "reason missing")
        check(not d.find_elements(By.CSS_SELECTOR, "main img"), "a reason became an element")
        no_alert(d, "stack page")
        keyboard(d)
        # Step 5: widen to 50 %, then roll back, from the page.
        d.get(f"{BASE}/ui/stacks/{STACK}")
        Select(d.find_element(By.ID, "widen-percent")).select_by_value("50")
        d.find_element(By.CSS_SELECTOR, "form[action$='/rollout'] button").click()
        WebDriverWait(d, 10).until(lambda d: d.find_elements(By.ID, "effect"))
        moving = sum(1 for c in CELLS if selected(2, c, 50) and not selected(2, c, 10))
        d.save_screenshot(os.path.join(SHOTS, "confirm-widen.png"))
        if DOCS:
            d.set_window_size(1100, 420)
            d.save_screenshot(os.path.join(DOCS, "console-confirm.png"))
            d.set_window_size(1280, 1500)
        confirm_effect(d, f"{moving} of 200 reporting cells will move to promotion 2")
        r = stack_show()["rollout"]
        check(r == {"promotion": 2, "percent": 50, "previous": 1}, f"after widen, the CLI shows {r}")
        cross_site(d, r)
        d.get(f"{BASE}/ui/stacks/{STACK}")
        d.find_element(By.ID, "rollback-reason").send_keys("console test: <b>bad</b> build")
        d.find_element(By.CSS_SELECTOR, "form[action$='/rollback'] button").click()
        WebDriverWait(d, 10).until(lambda d: d.find_elements(By.ID, "effect"))
        back = sum(1 for c in CELLS if selected(2, c, 50))
        d.save_screenshot(os.path.join(SHOTS, "confirm-rollback.png"))
        confirm_effect(d, f"{back} of 200 reporting cells will move back to promotion 1")
        s = stack_show()
        check(s["rollout"] == {"promotion": 1, "percent": 100}, f"after rollback, the CLI shows {s['rollout']}")
        last = s["history"][-1]
        check(last["who"] == ADMIN[0] and last["action"] == "rollback", f"audit record {last}")
        d.get(f"{BASE}/ui/stacks/{STACK}")
        console_errors(d, "stack page after rollback")
        d.save_screenshot(os.path.join(SHOTS, "stack-after-rollback.png"))
    finally:
        d.quit()
    reader(expected)
    padmin(expected)
    print(json.dumps({"cells": expected, "moved_on_widen": moving, "moved_back": back}))


if __name__ == "__main__":
    main()
