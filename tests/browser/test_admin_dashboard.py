"""The admin dashboard in headless Chromium against a real dock (uvicorn + a Celery worker):
sends a visitor to the web sign-in and back, refuses a developer's session, signs in as admin
(the page and its scripts hold no key: the session is an httpOnly cookie), shows a running job's progress and a failed job's
reason, retries it (the real worker runs it again), approves a learnware the worker validated,
rejects another, cancels a job, signs out through the web sign-out, links to Flower, and leaves
a screenshot in docs/admin-dashboard.png."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from app.bench.builders import train_tfidf_onnx_learnware
from app.jobs.stages import FIT_TASK_SPEC, REBUILD_INDEX
from app.ml.data import load_task
from tests.admin.conftest import failed_job, learnware_awaiting_review, running_job
from tests.browser.conftest import REPO, WORKER_NAME, Dock
from tests.fixtures.service import write_spec

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

# The screenshot in docs/ is refreshed only when asked (PAVEDOCK_UPDATE_SCREENSHOT=1), so a test
# run leaves the tree clean; otherwise it goes to a temporary folder.
SCREENSHOT = (
    REPO / "docs" / "admin-dashboard.png"
    if os.environ.get("PAVEDOCK_UPDATE_SCREENSHOT") == "1"
    else Path(tempfile.gettempdir()) / "pavedock-admin-dashboard.png"
)
FAILURE = "worker cpu@dock-2 lost during index.rebuild (no heartbeat for 75 s); gave up after 3 attempts"


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # the page re-renders between polls: retry on stale elements
            last = exc
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last})" if last else ""))


def submit_learnware(dock: Dock, datasets_dir: Path, tmp_path: Path) -> tuple[int, int]:
    """A real package with the developer's spec, through the API; the worker validates it."""
    task = load_task(datasets_dir, "sms_spam", "train", limit=400, seed=0)
    package = train_tfidf_onnx_learnware(task, tmp_path / "spam.zip", name="sms-spam-filter")
    [space] = httpx.get(f"{dock.url}/v1/spec-spaces", headers=dock.auth(dock.developer)).json()
    spec = write_spec(
        tmp_path / "spec", space["id"], np.sign(np.random.default_rng(0).standard_normal(space["dim"]))
    )
    response = httpx.post(
        f"{dock.url}/v1/learnwares",
        headers=dock.auth(dock.developer),
        files={
            "package": ("spam.zip", package.read_bytes(), "application/zip"),
            "spec": ("spec.safetensors", spec.read_bytes(), "application/octet-stream"),
        },
        timeout=60,
    )
    assert response.status_code == 202, response.text
    return int(response.json()["learnware_id"]), int(response.json()["job_id"])


def space(dock: Dock) -> tuple[str, int]:
    [record] = httpx.get(f"{dock.url}/v1/spec-spaces", headers=dock.auth(dock.developer)).json()
    return str(record["id"]), int(record["dim"])


def job_state(dock: Dock, job_id: int) -> dict[str, Any]:
    response = httpx.get(f"{dock.url}/v1/jobs/{job_id}", headers=dock.auth(dock.admin))
    assert response.status_code == 200
    return dict(response.json())


def test_admin_dashboard_in_chromium(dock: Dock, browser: Any, datasets_dir: Path, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    learnware_id, ingest_job = submit_learnware(dock, datasets_dir, tmp_path)
    wait_for(
        f"the worker to validate learnware {learnware_id} (logs in {dock.logs})",
        lambda: job_state(dock, ingest_job)["state"] == "succeeded",
        timeout=90,
    )
    running = running_job(
        dock.runtime,
        worker="gpu@dock-1",
        progress=0.42,
        message="fitting the task's spec: step 42 of 100",
        stage=FIT_TASK_SPEC,
    )
    failed = failed_job(dock.runtime, worker="cpu@dock-2", reason=FAILURE, stage=REBUILD_INDEX)
    for _ in range(20):  # some API traffic for the latency chart
        httpx.get(f"{dock.url}/v1/learnwares", headers=dock.auth(dock.developer))

    def find(selector: str) -> Any:
        return driver.find_element(By.CSS_SELECTOR, selector)

    def sign_in(token: str) -> None:
        """From /admin: the web sign-in form, which comes back to /admin."""
        driver.delete_all_cookies()
        driver.get(f"{dock.url}/admin")
        wait_for("the sign-in form", lambda: "/signin?next=%2Fadmin" in driver.current_url)
        field = wait_for("the key field", lambda: find("#api_key"))
        field.send_keys(token)
        find("#signin-button").click()
        wait_for("the way back", lambda: driver.current_url == f"{dock.url}/admin")

    sign_in(dock.developer)
    assert "403" in find("h1").text
    assert "needs an admin key" in find("#error-message").text
    assert not driver.find_elements(By.ID, "dashboard")

    sign_in(dock.admin)
    wait_for("the dashboard", lambda: find("#dashboard").is_displayed())
    assert "browser admin" in find("#whoami").text
    # No key anywhere a script could read it: not in storage (htmx keeps only the sign-in page's
    # path there), and the session cookie is httpOnly.
    cookie_text, storage = driver.execute_script(
        "return [document.cookie, JSON.stringify([{...sessionStorage}, {...localStorage}])]"
    )
    assert cookie_text == "" and "pdk_" not in storage, storage
    [cookie] = driver.get_cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and dock.admin not in cookie["value"]

    # A running job's progress, in the jobs table and beside its worker.
    row = f'#jobs tr[data-job="{running}"]'
    bar = wait_for("the running job", lambda: find(f"{row} [role=progressbar]"))
    assert bar.get_attribute("aria-valuenow") == "42"
    assert find(f"{row} .pct").text == "42%"
    assert find(f"{row} .badge").text == "running"
    assert "42%" in find('#workers tr[data-worker="gpu@dock-1"]').text
    # The real worker answers the dashboard's broadcast.
    wait_for(
        "the real worker to answer",
        lambda: find(f'#workers tr[data-worker="{WORKER_NAME}"] .badge').text == "online",
        timeout=45,
    )
    # A failed job's reason, and the learnware the worker left for review.
    failed_row = f'#jobs tr[data-job="{failed}"]'
    assert wait_for("the failed job", lambda: find(f'{failed_row} [data-role="reason"]').text) == FAILURE
    review_row = f'#review tr[data-learnware="{learnware_id}"]'
    assert "sms-spam-filter" in wait_for("the review queue", lambda: find(review_row)).text
    find("#chart-window").send_keys("5 min")
    wait_for("job bars", lambda: driver.find_elements(By.CSS_SELECTOR, "#chart-jobs rect[fill='#f97066']"))
    wait_for(
        "latency lines", lambda: driver.find_elements(By.CSS_SELECTOR, "#chart-latency path"), timeout=30
    )
    save_screenshot(driver)

    # Retry the failed job through the API: the real worker runs it again.
    find(f'{failed_row} [data-action="log"]').click()
    wait_for("its log", lambda: FAILURE in find(f'#jobs tr[data-log="{failed}"] pre').text)
    find(f'{failed_row} [data-action="retry"]').click()
    wait_for(
        "the retried job to succeed", lambda: find(f"{failed_row} .badge").text == "succeeded", timeout=60
    )
    job = job_state(dock, failed)
    assert job["state"] == "succeeded" and job["error"] is None and job["worker"] == WORKER_NAME
    assert any("retried by key" in line for line in job["log"])

    # Approve the learnware: it leaves the queue and enters the index.
    find(f'{review_row} [data-action="approve"]').click()
    wait_for("the review queue to empty", lambda: not driver.find_elements(By.CSS_SELECTOR, review_row))
    wait_for("the index to hold it", lambda: find('#indexes [data-role="indexed"]').text == "1")
    learnware = httpx.get(
        f"{dock.url}/v1/learnwares/{learnware_id}", headers=dock.auth(dock.developer)
    ).json()
    assert learnware["status"] == "ready"

    # Reject another, with a reason typed across a few of the page's refreshes.
    other = learnware_awaiting_review(
        dock.runtime, space(dock), dock.developer.split("_")[1], "near-duplicate"
    )
    other_row = f'#review tr[data-learnware="{other}"]'
    wait_for("the second learnware", lambda: find(f'{other_row} [data-action="reject"]')).click()
    reason_field = find(f"{other_row} input")
    for word in ("duplicates", " learnware ", str(learnware_id)):
        reason_field.send_keys(word)
        time.sleep(1.5)
    find(f'{other_row} [data-action="confirm-reject"]').click()
    wait_for("the rejection", lambda: not driver.find_elements(By.CSS_SELECTOR, other_row))
    rejected = httpx.get(f"{dock.url}/v1/learnwares/{other}", headers=dock.auth(dock.admin)).json()
    assert (rejected["status"], rejected["status_reason"]) == (
        "rejected",
        f"duplicates learnware {learnware_id}",
    )

    # Cancel the running job.
    find(f'{row} [data-action="cancel"]').click()
    wait_for("the cancellation", lambda: find(f"{row} .badge").text == "cancelled")
    assert job_state(dock, running)["state"] == "cancelled"

    # An action without the session's CSRF token, made from the page itself, is refused.
    assert fetch_status(driver, f"/v1/admin/jobs/{failed}/retry", "POST") == 403

    # Flower, started as `pavedock serve` starts it, behind the dashboard's link.
    link = find("#flower-link")
    assert link.is_displayed() and link.get_attribute("href").rstrip("/") == dock.flower

    # Sign-out is the web sign-out: the session ends for the pages and the API alike.
    find("#sign-out").click()
    wait_for("the sign-in form", lambda: driver.current_url.endswith("/signin"))
    driver.get(f"{dock.url}/admin")
    assert "/signin?next=%2Fadmin" in driver.current_url
    assert fetch_status(driver, "/v1/admin/overview", "GET") == 401
    wait_for(
        "Flower to answer", lambda: httpx.get(f"{dock.flower}/healthcheck").status_code == 200, timeout=90
    )
    driver.get(dock.flower)
    wait_for("Flower's page", lambda: "Flower" in driver.title, timeout=30)


def fetch_status(driver: Any, path: str, method: str) -> int:
    """The status of a same-origin request the page's own script makes (cookies included)."""
    return int(
        driver.execute_async_script(
            """const done = arguments[arguments.length - 1];
            fetch(arguments[0], {method: arguments[1], credentials: "same-origin"}).then((r) => done(r.status));""",
            path,
            method,
        )
    )


def save_screenshot(driver: Any) -> None:
    """The whole dashboard, top to bottom, into docs/."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1440, int(height) + 100)
    driver.execute_script("window.scrollTo(0, 0)")
    time.sleep(0.5)
    SCREENSHOT.parent.mkdir(exist_ok=True)
    assert driver.save_screenshot(str(SCREENSHOT))
