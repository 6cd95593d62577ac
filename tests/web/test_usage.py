"""A learnware page's "How to use it", pasted as a user would: every snippet runs on the package
it names and gives what the dock's own runner gives (the pooled-linear one is run in
tests/transfer/test_utd_learnware.py)."""

from __future__ import annotations

import functools
import html
import re
import shlex
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.ml.packages import extract_package
from app.ml.runners import load_runner
from app.runtime import Runtime
from tests.fixtures.service import Keys

TEXTS = ["an example text", "a wonderful, moving film", "free prize, call now"]


def _snippets(client: TestClient, keys: Keys, learnware_id: int) -> dict[str, str]:
    """The page's snippets by id, as the browser shows them (HTML entities decoded)."""
    from tests.web.conftest import sign_in

    sign_in(client, keys.developer)  # the owner sees it before it is ready
    page = client.get(f"/learnwares/{learnware_id}").text
    found = re.findall(r'<pre><code id="code-([\w-]+)">(.*?)</code></pre>', page, re.S)
    return {name: html.unescape(code) for name, code in found}


class _InProcess(httpx.BaseTransport):
    """The test client's transport, its bodies read whole (the dock's client streams them)."""

    def __init__(self, inner: httpx.BaseTransport):
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        return httpx.Response(response.status_code, headers=response.headers, content=response.read())


@pytest.fixture
def in_process(client: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The dock's client talks to this test's app (the snippet's URL is the page's own), in an
    empty folder the snippets write into."""
    import app.client

    monkeypatch.setattr(
        app.client,
        "DockClient",
        functools.partial(app.client.DockClient, transport=_InProcess(client._transport)),  # type: ignore[attr-defined]
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _submitted(runtime: Runtime, package: Path) -> int:
    """The developer's package, through the learnware service (a whole transformers model is
    over the test app's upload limit)."""
    from sqlalchemy import select

    from app.db.models import ApiKey
    from app.learnwares import service as learnwares

    with runtime.db.session() as session:
        developer = session.scalars(select(ApiKey).where(ApiKey.name == "developer")).one()
        learnware, _job = learnwares.submit(session, runtime, developer, package, None)
        return learnware.id


def _download_both_ways(snippets: dict[str, str], keys: Keys, package: Path, learnware_id: int) -> None:
    """The CLI and the Python client snippets fetch the very package."""
    from app.cli.main import app as cli

    *exports, command = snippets["cli"].replace("pdk_…", keys.developer).splitlines()
    env = dict(line.split("#")[0].strip().removeprefix("export ").split("=", 1) for line in exports)
    args = shlex.split(command)
    assert args[0] == "pavedock"
    result = CliRunner().invoke(cli, args[1:], env=env)
    assert result.exit_code == 0, result.output
    assert Path(f"learnware-{learnware_id}.zip").read_bytes() == package.read_bytes()
    Path(f"learnware-{learnware_id}.zip").unlink()

    exec(snippets["client"].replace("pdk_…", keys.developer), {})
    assert Path(f"learnware-{learnware_id}.zip").read_bytes() == package.read_bytes()


def _run(snippets: dict[str, str], name: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(snippets[name], namespace)
    return namespace


def test_the_onnx_snippets_run(
    client: TestClient, keys: Keys, runtime: Runtime, in_process: Path, tfidf_packages: dict[str, Path]
) -> None:
    package = tfidf_packages["sms_spam"]
    learnware_id = _submitted(runtime, package)
    snippets = _snippets(client, keys, learnware_id)
    assert set(snippets) == {"cli", "client", "runner", "onnx"}
    _download_both_ways(snippets, keys, package, learnware_id)
    runner = _run(snippets, "runner")["runner"]  # extracts learnware-<id>/, as the page says
    got = _run(snippets, "onnx")["labels"]
    names = list(runner.label_names)
    as_names = [names[int(y)] if not isinstance(y, str | bytes) else str(y) for y in np.ravel(got)]
    assert as_names == [names[int(y)] for y in runner.predict(["an example text"]).labels]


def test_the_transformers_snippet_runs(
    client: TestClient, keys: Keys, runtime: Runtime, in_process: Path, linear_packages: dict[str, Path]
) -> None:
    package = linear_packages["sst2"]
    learnware_id = _submitted(runtime, package)
    snippets = _snippets(client, keys, learnware_id)
    assert set(snippets) == {"cli", "client", "runner", "transformers"}
    _download_both_ways(snippets, keys, package, learnware_id)
    _run(snippets, "runner")
    logits = _run(snippets, "transformers")["logits"]
    dock = load_runner(extract_package(package, in_process / "dock"))
    assert logits.argmax(dim=-1).tolist() == dock.predict(["an example text"]).labels.tolist()


def test_the_peft_snippet_runs(
    client: TestClient, keys: Keys, runtime: Runtime, in_process: Path, lora_packages: dict[str, Path]
) -> None:
    import torch

    from app.ml.encoders import embed_texts

    package = lora_packages["sst2"]
    learnware_id = _submitted(runtime, package)
    snippets = _snippets(client, keys, learnware_id)
    assert set(snippets) == {"cli", "client", "runner", "peft"}
    _download_both_ways(snippets, keys, package, learnware_id)
    runner = _run(snippets, "runner")["runner"]
    loaded = _run(snippets, "peft")
    features = embed_texts(loaded["base"], TEXTS, model=loaded["model"].eval())
    torch.testing.assert_close(features, runner.features(TEXTS))
    with loaded["model"].disable_adapter():  # the adapter is applied, not ignored
        plain = embed_texts(loaded["base"], TEXTS, model=loaded["model"])
    assert not torch.allclose(features, plain)
