"""The market's pages in headless Chromium against a real dock (uvicorn + a Celery worker):

- a developer signs in, has a bad package refused beside the field (nothing stored), submits a
  real package and watches it become ready;
- a user signs in, pastes a few-shot task, sees the learnware of that task ranked first, opens
  its page, downloads it, fine-tunes it and follows the job until the result is their own;
- a user cannot open another user's task or a developer's private learnware by URL;
- a non-admin gets no admin page (no link, a 403 at /admin); an admin gets the link, and the
  dashboard on the same session (no second sign-in).

With PAVEDOCK_UPDATE_SCREENSHOT=1 each page's screenshot is written to docs/screenshots/.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.db.models import ApiKey, Role
from app.learnwares import service as learnwares
from app.ml.data import few_shot, load_task
from app.tasks import service as tasks
from app.tasks.schemas import TaskCreate
from tests.browser.conftest import REPO, Dock

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

SHOTS = (
    REPO / "docs" / "screenshots"
    if os.environ.get("PAVEDOCK_UPDATE_SCREENSHOT") == "1"
    else Path(tempfile.gettempdir()) / "pavedock-web-screenshots"
)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # htmx swaps parts of the page between polls
            last = exc
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last})" if last else ""))


def screenshot(driver: Any, name: str, width: int = 1280) -> None:
    """The whole page at ``width`` into SHOTS/name.png."""
    driver.set_window_size(width, 900)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(int(height) + 160, 4000))  # the window's frame included
    driver.execute_script("window.scrollTo(0, 0)")  # from the top, wherever a click scrolled it
    time.sleep(0.4)
    SHOTS.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(SHOTS / f"{name}.png"))
    driver.set_window_size(1280, 1000)


def submit_via_api(dock: Dock, package: Path) -> tuple[int, int]:
    response = httpx.post(
        f"{dock.url}/v1/learnwares",
        headers=dock.auth(dock.developer),
        files={"package": (package.name, package.read_bytes(), "application/zip")},
        timeout=120,
    )
    assert response.status_code == 202, response.text
    return int(response.json()["learnware_id"]), int(response.json()["job_id"])


def learnware(dock: Dock, learnware_id: int, token: str) -> dict[str, Any]:
    response = httpx.get(f"{dock.url}/v1/learnwares/{learnware_id}", headers=dock.auth(token))
    assert response.status_code == 200, response.text
    return dict(response.json())


def wait_ready(dock: Dock, learnware_id: int, timeout: float = 300) -> None:
    wait_for(
        f"learnware {learnware_id} to be ready (logs in {dock.logs})",
        lambda: learnware(dock, learnware_id, dock.admin)["status"] == "ready",
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def catalog(market: Dock, lora_packages: dict[str, Path], tfidf_packages: dict[str, Path]) -> dict[str, int]:
    """A small real market, submitted through the API: an SST-2 LoRA adapter and two other
    tasks' ONNX models, all indexed."""
    ids = {
        "sst2-lora": submit_via_api(market, lora_packages["sst2"])[0],
        "trec-tfidf": submit_via_api(market, tfidf_packages["trec"])[0],
        "sms-tfidf": submit_via_api(market, tfidf_packages["sms_spam"])[0],
    }
    for learnware_id in ids.values():
        wait_ready(market, learnware_id)
    return ids


def sign_in(driver: Any, dock: Dock, token: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.delete_all_cookies()
    driver.get(f"{dock.url}/signin")
    field = wait_for("the sign-in form", lambda: driver.find_element(By.ID, "api_key"))
    field.send_keys(token + Keys.ENTER)  # the keyboard alone signs in
    wait_for("the signed-in page", lambda: driver.find_element(By.ID, "whoami").is_displayed())


def assert_labelled(driver: Any) -> None:
    """Every visible form control has a label (or an aria-label) a screen reader announces."""
    unlabelled = driver.execute_script(
        """return [...document.querySelectorAll("input, select, textarea")]
            .filter((el) => el.type !== "hidden" && !(el.labels && el.labels.length) && !el.getAttribute("aria-label"))
            .map((el) => el.id || el.name);"""
    )
    assert unlabelled == [], unlabelled


CONTRAST_JS = """
// WCAG 2 contrast of every visible text against the background it is drawn on (the
// ancestors' background colours composited, alpha and all): 4.5:1, or 3:1 for large text.
const parse = (c) => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return [0, 0, 0, 0];
  const v = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number); return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1]; };
const over = (top, bottom) => { const a = top[3] + bottom[3] * (1 - top[3]);
  return a === 0 ? [0, 0, 0, 0] : [0, 1, 2].map((i) => (top[i] * top[3] + bottom[i] * bottom[3] * (1 - top[3])) / a).concat([a]); };
const lum = (c) => { const [r, g, b] = c.slice(0, 3).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
const background = (el) => { const layers = [];
  for (let n = el; n && n.nodeType === 1; n = n.parentElement) { const c = parse(getComputedStyle(n).backgroundColor);
    if (c[3] > 0) { layers.push(c); if (c[3] === 1) break; } }
  return layers.reverse().reduce((acc, c) => over(c, acc), [255, 255, 255, 1]); };
const failures = [];
for (const el of document.querySelectorAll("body *")) {
  if (!el.checkVisibility || !el.checkVisibility({opacityProperty: true, visibilityProperty: true})) continue;
  const text = [...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join("").trim();
  if (!text || el.closest("[disabled]")) continue;
  const style = getComputedStyle(el);
  const bg = background(el);
  const fg = over(parse(style.color), bg);
  const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
  const ratio = (hi + 0.05) / (lo + 0.05);
  const size = parseFloat(style.fontSize), bold = Number(style.fontWeight) >= 700;
  const needed = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
  if (ratio < needed) failures.push(`${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""}.${el.className} "${text.slice(0, 40)}": ${ratio.toFixed(2)} < ${needed}`);
}
return failures;
"""


def assert_contrast(driver: Any) -> None:
    """Every visible text meets WCAG AA contrast on its background."""
    failures = driver.execute_script(CONTRAST_JS)
    assert failures == [], failures


def assert_fits_a_phone(driver: Any, width: int = 360) -> None:
    """At phone width the page needs no sideways scrolling (wide code and tables scroll in
    their own boxes)."""
    driver.set_window_size(width, 800)
    time.sleep(0.3)
    overflow = driver.execute_script(
        """const out = [];
        const limit = document.documentElement.clientWidth;
        if (document.documentElement.scrollWidth <= limit) return out;
        for (const el of document.querySelectorAll("body *")) {
          const box = el.getBoundingClientRect();
          const clipped = el.parentElement && el.parentElement.closest("pre, .table-wrap");
          if (box.right > limit + 1 && box.width > 0 && !clipped) {
            out.push(`${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""}: right edge ${Math.round(box.right)} > ${limit}`);
          }
        }
        return out.length ? out : [`page: ${document.documentElement.scrollWidth} > ${limit}`];"""
    )
    driver.set_window_size(1280, 1000)
    assert overflow == [], overflow


RECORD_UPLOAD_JS = """
sessionStorage.setItem("upload", "[]");
document.addEventListener("htmx:xhr:progress", (event) => {
  const seen = JSON.parse(sessionStorage.getItem("upload"));
  seen.push({loaded: event.detail.loaded, total: event.detail.total,
             shown: !document.getElementById("upload").hidden,
             value: document.getElementById("upload-progress").value});
  sessionStorage.setItem("upload", JSON.stringify(seen));
});
"""


def assert_keyboard_first_stop(driver: Any) -> None:
    """The first Tab lands on the skip link, and Enter on it puts the focus on the content;
    no control jumps the natural tab order."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.execute_script("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0);")
    driver.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    assert driver.execute_script("return document.activeElement.className") == "skip"
    driver.switch_to.active_element.send_keys(Keys.ENTER)
    wait_for(
        "the focus on the content",
        lambda: driver.execute_script("return document.activeElement.id") == "main",
    )
    assert (
        driver.execute_script(
            'return document.querySelectorAll(\'[tabindex]:not([tabindex="-1"]):not([tabindex="0"])\').length'
        )
        == 0
    )


def press_enter_on(driver: Any, element_id: str, limit: int = 40) -> None:
    """Tab from the focused control to ``element_id`` (it must come in the tab order) and press
    Enter there, as someone without a mouse would."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    for _ in range(limit):
        if driver.execute_script("return document.activeElement.id") == element_id:
            ActionChains(driver).send_keys(Keys.ENTER).perform()
            return
        ActionChains(driver).send_keys(Keys.TAB).perform()
    raise AssertionError(f"#{element_id} is not reached with Tab from where the focus was")


def check_page(driver: Any) -> None:
    """What every page must give everyone: labelled controls, readable contrast, phone width."""
    assert_labelled(driver)
    assert_contrast(driver)
    assert_fits_a_phone(driver)


def drop_file(driver: Any, zone_selector: str, name: str, data: bytes) -> None:
    """Drag and drop a file onto a drop zone, as a desktop would (a DragEvent with files)."""
    driver.execute_script(
        """const [selector, name, b64] = arguments;
        const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        const transfer = new DataTransfer();
        transfer.items.add(new File([bytes], name, {type: "application/zip"}));
        const zone = document.querySelector(selector);
        zone.dispatchEvent(new DragEvent("dragover", {bubbles: true, cancelable: true, dataTransfer: transfer}));
        zone.dispatchEvent(new DragEvent("drop", {bubbles: true, cancelable: true, dataTransfer: transfer}));""",
        zone_selector,
        name,
        base64.b64encode(data).decode(),
    )


def assert_console_clean(driver: Any) -> None:
    """No script error and nothing the page's CSP refused (htmx and web.js run under it)."""
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    refused = [m for m in errors if "Content Security Policy" in m or "Uncaught" in m]
    assert not refused, refused


def nav_links(driver: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [a.get_attribute("data-nav") for a in driver.find_elements(By.CSS_SELECTOR, "nav [data-nav]")]


def test_developer_submits_a_package_and_sees_it_ready(
    market: Dock, browser: Any, catalog: dict[str, int], lora_packages: dict[str, Path], tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(f"{market.url}/submit")
    wait_for("the sign-in redirect", lambda: "/signin" in driver.current_url)
    screenshot(driver, "signin")
    check_page(driver)
    sign_in(driver, market, market.developer)
    assert nav_links(driver) == ["/", "/find", "/submit", "/mine"]

    # A zip without learnware.yaml: refused beside the field, with the API's reason; nothing kept.
    bad = tmp_path / "not-a-learnware.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("model.onnx", b"not a model")
    driver.get(f"{market.url}/submit")
    check_page(driver)
    drop_file(driver, "[data-dropzone]", bad.name, bad.read_bytes())
    assert driver.execute_script("return document.getElementById('package').files[0].name") == bad.name
    driver.find_element(By.ID, "submit-button").click()
    error = wait_for("the refusal", lambda: driver.find_element(By.ID, "package-error").text)
    assert "learnware.yaml" in error
    assert driver.find_element(By.ID, "package").get_attribute("aria-invalid") == "true"
    mine = httpx.get(
        f"{market.url}/v1/learnwares", params={"mine": True}, headers=market.auth(market.developer)
    )
    assert mine.json()["pagination"]["total_count"] == len(catalog)  # only the catalog's
    check_page(driver)  # the refusal too
    screenshot(driver, "submit")

    # A real package: uploaded with a progress bar, then followed until it is ready. What the
    # bar shows at each progress event is kept in sessionStorage (the page moves on after).
    driver.execute_script(RECORD_UPLOAD_JS)
    driver.find_element(By.ID, "package").send_keys(str(lora_packages["sms_spam"]))
    driver.find_element(By.ID, "submit-button").click()
    wait_for("the learnware's page", lambda: "/learnwares/" in driver.current_url)
    seen = json.loads(driver.execute_script("return sessionStorage.getItem('upload')"))
    size = lora_packages["sms_spam"].stat().st_size
    upload = [e for e in seen if e["total"] >= size]  # the request body's events
    assert upload and upload[-1]["loaded"] == upload[-1]["total"], seen
    assert all(e["shown"] for e in upload) and upload[-1]["value"] == 100, seen
    learnware_id = int(driver.current_url.rstrip("/").split("/")[-1])
    wait_for(
        f"learnware {learnware_id} to be ready on its page (logs in {market.logs})",
        lambda: driver.find_element(By.CSS_SELECTOR, "#lw-status .badge").text == "ready",
        timeout=300,
    )
    assert "sms" in driver.find_element(By.TAG_NAME, "h1").text.lower()
    assert "Ready and indexed" in driver.find_element(By.ID, "lw-status").text
    assert learnware(market, learnware_id, market.developer)["status"] == "ready"
    driver.refresh()  # the page reloads itself once ready; settle on the reloaded one
    assert "fitted the spec" in driver.find_element(By.ID, "job-log").get_attribute("textContent")
    check_page(driver)

    driver.get(f"{market.url}/mine")
    row = wait_for(
        "my learnwares", lambda: driver.find_element(By.CSS_SELECTOR, f'tr[data-learnware="{learnware_id}"]')
    )
    assert "ready" in row.text
    check_page(driver)
    screenshot(driver, "mine")
    assert_console_clean(driver)


def _shots_csv(datasets_dir: Path) -> tuple[str, list[str]]:
    shots = few_shot(load_task(datasets_dir, "sst2", "train"), per_class=6, seed=0)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["text", "label"])
    for text, label in zip(shots.texts, shots.labels, strict=True):
        writer.writerow([text, shots.label_names[int(label)]])
    return out.getvalue(), list(shots.label_names)


def test_user_finds_a_model_downloads_and_fine_tunes_it(
    market: Dock, browser: Any, downloads: Path, catalog: dict[str, int], datasets_dir: Path
) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    sign_in(driver, market, market.user)
    assert nav_links(driver) == ["/", "/find", "/mine"]
    assert_keyboard_first_stop(driver)

    # Browse: search over label names finds the adapter; a filter narrows to ONNX models.
    box = driver.find_element(By.ID, "q")
    box.send_keys("positive")
    wait_for("the search", lambda: "matching “positive”" in driver.find_element(By.ID, "result-count").text)
    cards = driver.find_elements(By.CSS_SELECTOR, "#results .card")
    assert [int(c.get_attribute("data-learnware")) for c in cards] == [catalog["sst2-lora"]]
    assert "?q=positive" in driver.current_url
    check_page(driver)

    # Find a model: paste the task's examples (CSV with a header).
    text, label_names = _shots_csv(datasets_dir)
    driver.get(f"{market.url}/find")
    check_page(driver)
    driver.find_element(By.ID, "examples").send_keys("just one line,positive")
    driver.find_element(By.ID, "find-button").click()
    error = wait_for("the refusal", lambda: driver.find_element(By.ID, "examples-error").text)
    assert "at least two" in error
    check_page(driver)
    screenshot(driver, "find")
    field = driver.find_element(By.ID, "examples")
    field.clear()
    field.send_keys(text)
    press_enter_on(driver, "find-button")  # from the examples, by the keyboard alone
    wait_for("the task's page", lambda: "/tasks/" in driver.current_url)
    task_id = int(driver.current_url.rstrip("/").split("/")[-1])
    first = wait_for(
        f"the ranking (logs in {market.logs})",
        lambda: driver.find_element(By.CSS_SELECTOR, "#ranking li"),
        timeout=300,
    )
    assert int(first.get_attribute("data-learnware")) == catalog["sst2-lora"]
    assert first.get_attribute("data-rank") == "1"
    assert "your label set" in first.text and "Accuracy on your examples" in first.text
    assert driver.find_element(By.ID, "reuse").is_displayed()
    check_page(driver)
    screenshot(driver, "task")

    # Its page, in another tab (the task's page keeps the pasted examples for the fine-tune).
    task_tab = driver.current_window_handle
    driver.switch_to.new_window("tab")
    driver.get(f"{market.url}/learnwares/{catalog['sst2-lora']}")
    assert "pavedock download" in driver.find_element(By.ID, "code-cli").text
    assert driver.find_element(By.ID, "code-peft").text
    # Copyable: the button puts the snippet on the clipboard (read back here).
    driver.execute_cdp_cmd(
        "Browser.grantPermissions",
        {"origin": market.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
    )
    copy = driver.find_element(By.CSS_SELECTOR, 'button[data-copy="code-cli"]')
    copy.click()
    wait_for("the copy", lambda: copy.text == "Copied")
    pasted = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "navigator.clipboard.readText().then(done, (e) => done(`refused: ${e}`));"
    )
    assert pasted == driver.find_element(By.ID, "code-cli").get_attribute("textContent")
    driver.find_element(By.ID, "download").click()
    package = wait_for("the download", lambda: next((p for p in downloads.glob("*.zip")), None), timeout=60)
    with zipfile.ZipFile(package) as zf:
        assert "learnware.yaml" in zf.namelist()
    driver.refresh()
    assert driver.find_element(By.ID, "downloads").text == "1"
    check_page(driver)
    screenshot(driver, "learnware")
    driver.close()
    driver.switch_to.window(task_tab)

    # Fine-tune it on the examples and follow the job until the result is this user's.
    steps = driver.find_element(By.ID, "steps")
    steps.clear()
    steps.send_keys("10")
    assert label_names == [
        n.strip() for n in driver.find_element(By.ID, "reuse-label_names").get_attribute("value").split(",")
    ]
    press_enter_on(driver, "reuse-button")
    made = wait_for(
        f"the fine-tuned learnware (logs in {market.logs})",
        lambda: driver.find_element(By.ID, "made"),
        timeout=600,
    )
    assert "Ready" in made.text and "your own learnware" in made.text
    assert driver.find_element(By.CSS_SELECTOR, "[data-role=heldout]").text.endswith("%")
    check_page(driver)
    screenshot(driver, "fine-tune")
    job_page = driver.find_element(By.CSS_SELECTOR, 'h2 a[href^="/jobs/"]').get_attribute("href")
    made.find_element(By.TAG_NAME, "a").click()
    wait_for("its page", lambda: "Fine-tuned from" in driver.find_element(By.ID, "lineage").text)
    own_id = int(driver.current_url.rstrip("/").split("/")[-1])
    own = learnware(market, own_id, market.user)
    assert own["status"] == "ready" and own["lineage"]["from"] == [catalog["sst2-lora"]]
    assert learnware(market, catalog["sst2-lora"], market.user)["ranked_first_count"] >= 1
    # The job's own page (where a transfer goes, too): finished, nothing polling, the log kept.
    driver.get(job_page)
    assert driver.find_element(By.CSS_SELECTOR, ".job").get_attribute("data-state") == "succeeded"
    assert driver.find_element(By.CSS_SELECTOR, ".job").get_attribute("hx-get") is None
    assert "Ready" in driver.find_element(By.ID, "made").text
    check_page(driver)
    screenshot(driver, "job")
    driver.get(f"{market.url}/tasks/{task_id}")
    assert driver.find_element(By.CSS_SELECTOR, "#ranking li").get_attribute("data-learnware") == str(
        catalog["sst2-lora"]
    )

    # The market by downloads: the adapter first, with its counters; the user's own fine-tune
    # among the cards (private, theirs alone).
    driver.get(f"{market.url}/?sort=downloads")
    cards = driver.find_elements(By.CSS_SELECTOR, "#results .card")
    assert int(cards[0].get_attribute("data-learnware")) == catalog["sst2-lora"]
    assert own_id in [int(c.get_attribute("data-learnware")) for c in cards]
    check_page(driver)
    screenshot(driver, "browse")
    screenshot(driver, "browse-phone", width=390)
    assert_console_clean(driver)


def test_a_user_cannot_reach_another_users_task_or_a_private_learnware(
    market: Dock,
    browser: Any,
    catalog: dict[str, int],
    lora_packages: dict[str, Path],
    datasets_dir: Path,
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    # Through the service layer: the first user's task, and a developer's private learnware.
    shots = few_shot(load_task(datasets_dir, "sst2", "train"), per_class=3, seed=1)
    with market.runtime.db.session() as session:
        user = session.query(ApiKey).filter_by(name="browser user").one()
        developer = session.query(ApiKey).filter_by(name="browser developer").one()
        task, _ = tasks.create_few_shot(
            session,
            market.runtime,
            user,
            TaskCreate(
                texts=shots.texts, labels=[int(y) for y in shots.labels], label_names=shots.label_names
            ),
        )
        copy = tmp_path / "private.zip"
        with zipfile.ZipFile(lora_packages["sst2"]) as src, zipfile.ZipFile(copy, "w") as dst:
            for item in src.infolist():
                dst.writestr(item, src.read(item))
            dst.writestr("NOTES.txt", "a private copy")  # another sha256: not a duplicate
        private, _ = learnwares.submit(session, market.runtime, developer, copy, None, private=True)
        task_id, private_id = task.id, private.id
        assert developer.role == Role.developer

    driver = browser
    sign_in(driver, market, market.user2)
    driver.get(f"{market.url}/tasks/{task_id}")
    assert "403" in driver.find_element(By.TAG_NAME, "h1").text
    assert "belongs to another key" in driver.find_element(By.ID, "error-message").text
    check_page(driver)
    screenshot(driver, "error")
    driver.get(f"{market.url}/tasks/{task_id}/progress")
    assert "403" in driver.find_element(By.TAG_NAME, "h1").text
    for path in (f"/learnwares/{private_id}", f"/learnwares/{private_id}/download"):
        driver.get(f"{market.url}{path}")
        assert "404" in driver.find_element(By.TAG_NAME, "h1").text, path
    # The owner sees both.
    sign_in(driver, market, market.user)
    driver.get(f"{market.url}/tasks/{task_id}")
    assert driver.find_element(By.TAG_NAME, "h1").text == f"Task {task_id}"
    sign_in(driver, market, market.developer)
    driver.get(f"{market.url}/learnwares/{private_id}")
    assert driver.find_element(By.CSS_SELECTOR, "[data-learnware]").get_attribute("data-learnware") == str(
        private_id
    )


def test_only_admins_get_the_admin_page(market: Dock, browser: Any, catalog: dict[str, int]) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    for token in (market.user, market.developer):
        sign_in(driver, market, token)
        assert "/admin" not in nav_links(driver)
        driver.get(f"{market.url}/admin")
        assert "403" in driver.find_element(By.TAG_NAME, "h1").text
        assert "needs an admin key" in driver.find_element(By.ID, "error-message").text
        assert not driver.find_elements(By.ID, "dashboard")
    sign_in(driver, market, market.admin)
    assert nav_links(driver)[-1] == "/admin"
    driver.find_element(By.CSS_SELECTOR, 'nav [data-nav="/admin"]').click()
    # The dashboard, on the same session: no second sign-in.
    wait_for("the dashboard", lambda: driver.find_element(By.ID, "dashboard").is_displayed())
    assert "browser admin" in driver.find_element(By.ID, "whoami").text
    assert not driver.find_elements(By.CSS_SELECTOR, "input[type=password]")
    wait_for("its first refresh", lambda: driver.find_element(By.ID, "updated").text.startswith("Updated"))

    # Sign-out ends the session: the pages send the visitor back to the sign-in form.
    driver.get(f"{market.url}/")
    driver.find_element(By.ID, "signout").click()
    wait_for("the sign-in form", lambda: driver.current_url.endswith("/signin"))
    driver.get(f"{market.url}/mine")
    assert "/signin" in driver.current_url and not driver.find_elements(By.ID, "whoami")
