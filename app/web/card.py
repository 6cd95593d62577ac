"""What a learnware's page shows beyond its row: the package's README and a few declared inputs
(read from the stored zip, once per package), the dock's spec and lineage, and how to use it."""

from __future__ import annotations

import io
import shutil
import tempfile
import zipfile
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from threading import Lock
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import ApiKey, Job, Learnware, LearnwareStatus, Role, Spec
from app.ml.jsonl import JsonlError, parse_jsonl
from app.runtime import Runtime
from app.storage.store import ArtifactNotFound

README_NAMES = ("README.md", "readme.md", "README.MD", "Readme.md", "README.txt", "README")
MAX_README_BYTES = 256 * 1024
SAMPLE_INPUTS = 5
MAX_SAMPLE_CHARS = 300


@dataclass(frozen=True)
class PackageExtras:
    readme: str | None = None
    readme_name: str | None = None
    sample_inputs: list[str] = field(default_factory=list)
    n_inputs: int = 0
    members: int = 0
    input_labels: tuple[int | None, ...] = ()
    """The class id each declared input is labelled with (None: no label), when any carries one."""
    unknown_labels: int = 0
    """Labels that are neither a label name nor a class id (not counted in the accuracy)."""


@dataclass(frozen=True)
class InputsAccuracy:
    """How often the model's predictions at validation match the labels its inputs carry."""

    n_labelled: int
    n_correct: int
    per_class: list[tuple[str, int, int]]
    """(label name, inputs of that label, of them predicted right)."""

    @property
    def accuracy(self) -> float:
        return self.n_correct / self.n_labelled


class ExtrasCache:
    """The extras of the last packages shown, by sha256 (a package never changes)."""

    def __init__(self, size: int = 256):
        self.size = size
        self._items: OrderedDict[str, PackageExtras] = OrderedDict()
        self._accuracy: OrderedDict[tuple[str, str], InputsAccuracy | None] = OrderedDict()
        self._lock = Lock()

    def get(self, runtime: Runtime, learnware: Learnware) -> PackageExtras:
        sha = learnware.package_sha256
        with self._lock:
            if sha in self._items:
                self._items.move_to_end(sha)
                return self._items[sha]
        extras = read_extras(
            runtime, sha, learnware.manifest.get("inputs"), tuple(learnware.label_names or ())
        )
        with self._lock:
            self._items[sha] = extras
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return extras

    def accuracy(
        self, runtime: Runtime, learnware: Learnware, extras: PackageExtras
    ) -> InputsAccuracy | None:
        """The accuracy on the labelled declared inputs, once validation stored the predictions."""
        if not extras.input_labels or learnware.predictions_sha256 is None:
            return None
        cache_key = (learnware.package_sha256, learnware.predictions_sha256)
        with self._lock:
            if cache_key in self._accuracy:
                return self._accuracy[cache_key]
        try:
            with np.load(io.BytesIO(runtime.store.get_bytes(cache_key[1])), allow_pickle=False) as data:
                predicted = np.asarray(data["labels"], dtype=np.int64)
        except (OSError, ValueError, KeyError, ArtifactNotFound):  # shown as "not measured"
            return None
        result = inputs_accuracy(extras.input_labels, predicted, list(learnware.label_names))
        with self._lock:
            self._accuracy[cache_key] = result
            while len(self._accuracy) > self.size:
                self._accuracy.popitem(last=False)
        return result


def inputs_accuracy(
    labels: tuple[int | None, ...], predicted: np.ndarray, label_names: list[str]
) -> InputsAccuracy | None:
    """Compare the labels of the inputs validation ran on (the first ``len(predicted)``) with
    the model's predictions; None when none of those inputs carries a label."""
    pairs = [(y, int(p)) for y, p in zip(labels[: len(predicted)], predicted, strict=False) if y is not None]
    if not pairs:
        return None
    per_class = []
    for class_id, name in enumerate(label_names):
        of_class = [p for y, p in pairs if y == class_id]
        if of_class:
            per_class.append((name, len(of_class), sum(p == class_id for p in of_class)))
    return InputsAccuracy(len(pairs), sum(y == p for y, p in pairs), per_class)


def _class_id(label: object, label_names: tuple[str, ...]) -> int | None:
    """A declared input's label as a class id: a label name (any case) or an id into them."""
    if isinstance(label, bool):
        return None
    if isinstance(label, int):
        return label if 0 <= label < len(label_names) else None
    if isinstance(label, str):
        if label in label_names:
            return label_names.index(label)
        folded = [n.casefold() for n in label_names]
        if label.casefold() in folded:
            return folded.index(label.casefold())
    return None


def _from_zip(zf: zipfile.ZipFile, inputs_name: str | None, label_names: tuple[str, ...]) -> PackageExtras:
    infos = {i.filename: i for i in zf.infolist()}
    readme = readme_name = None
    for name in README_NAMES:
        info = infos.get(name)
        if info is not None and info.file_size <= MAX_README_BYTES:
            readme = zf.read(info).decode("utf-8", errors="replace")
            readme_name = name
            break
    sample: list[str] = []
    labels: list[int | None] = []
    unknown = 0
    if inputs_name and inputs_name in infos:
        try:
            # The reader validation used: the n-th row here is the n-th input the model ran on.
            rows = [row for _, row in parse_jsonl(zf.read(infos[inputs_name]), inputs_name)]
        except JsonlError:  # checked at submission; a card shows no inputs rather than fail
            rows = []
        for row in rows:
            row = row if isinstance(row, dict) else {}
            if len(sample) < SAMPLE_INPUTS and isinstance(row.get("text"), str):
                text = row["text"]
                sample.append(text if len(text) <= MAX_SAMPLE_CHARS else text[:MAX_SAMPLE_CHARS] + "…")
            label = row.get("label")
            class_id = None if label is None else _class_id(label, label_names)
            unknown += label is not None and class_id is None
            labels.append(class_id)
    else:
        rows = []
    has_labels = any(y is not None for y in labels)
    return PackageExtras(
        readme,
        readme_name,
        sample,
        len(rows),
        len(infos),
        input_labels=tuple(labels) if has_labels else (),
        unknown_labels=unknown,
    )


def read_extras(
    runtime: Runtime, sha256: str, inputs_name: str | None, label_names: tuple[str, ...] = ()
) -> PackageExtras:
    """README and declared inputs (first texts, labels) of a stored package (checked at
    submission; only these members are read, each bounded)."""
    scratch = Path(tempfile.mkdtemp(prefix="card-", dir=runtime.settings.scratch_dir))
    try:
        path = runtime.store.fetch(sha256, scratch / "package.zip")
        with zipfile.ZipFile(path) as zf:
            return _from_zip(zf, inputs_name, label_names)
    except (OSError, zipfile.BadZipFile, KeyError, ArtifactNotFound):  # shown as an empty card part
        return PackageExtras()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def spec_facts(session: Session, learnware: Learnware) -> dict[str, Any] | None:
    """What the dock measured while fitting or checking the spec."""
    if learnware.spec_id is None:
        return None
    spec = session.get(Spec, learnware.spec_id)
    if spec is None:
        return None
    meta = dict(spec.meta or {})
    return {
        "id": spec.id,
        "dim": spec.dim,
        "source": "fitted by the dock"
        if learnware.spec_recomputed
        else "the developer's, checked by the dock",
        "seconds": meta.get("seconds"),
        "n_examples": meta.get("n_examples"),
        "sha256": spec.sha256,
    }


@dataclass(frozen=True)
class LineageLink:
    id: int
    name: str | None
    """None when this key may not see it."""


def lineage_links(session: Session, key: ApiKey, learnware: Learnware) -> list[LineageLink]:
    sources = [int(i) for i in (learnware.lineage or {}).get("from", [])]
    links = []
    for source_id in sources:
        row = session.get(Learnware, source_id)
        visible = (
            row is not None
            and row.status != LearnwareStatus.deleted
            and (
                (row.status == LearnwareStatus.ready and not row.private)
                or key.role == Role.admin
                or row.owner_id == key.id
            )
        )
        links.append(LineageLink(source_id, row.name if visible and row is not None else None))
    return links


def latest_ingest(session: Session, learnware_id: int) -> Job | None:
    return session.scalars(
        select(Job).where(Job.learnware_id == learnware_id).order_by(Job.id.desc()).limit(1)
    ).first()


def usage(learnware: Learnware, base_url: str) -> list[tuple[str, str, str]]:
    """(id, title, code) snippets for the page's "How to use it"."""
    lid = learnware.id
    folder = f"learnware-{lid}"
    snippets = [
        (
            "cli",
            "Download with the CLI",
            f"export PAVEDOCK_URL={base_url}\nexport PAVEDOCK_API_KEY=pdk_…   # your key\n"
            f"pavedock download {lid} --out {folder}.zip",
        ),
        (
            "client",
            "Download with the Python client",
            "from pathlib import Path\nfrom app.client import DockClient\n\n"
            f'with DockClient("{base_url}", "pdk_…") as dock:\n'
            f'    dock.download({lid}, Path("{folder}.zip"))',
        ),
        (
            "runner",
            "Run it as the dock does (checks the package, runs no uploaded code)",
            "from pathlib import Path\nfrom app.ml.packages import extract_package\n"
            "from app.ml.runners import load_runner\n\n"
            f'package = extract_package(Path("{folder}.zip"), Path("{folder}"))\n'
            "runner = load_runner(package)\n"
            'print(runner.label_names, runner.predict(["an example text"]).labels)',
        ),
    ]
    fmt = learnware.model_format
    if fmt == "peft-lora":
        snippets.append(
            (
                "peft",
                "Load the adapter with transformers and peft",
                f"# unzip {folder}.zip first; the adapter is in adapter/, over the base {learnware.base_model}\n"
                "from peft import PeftModel\nfrom app.ml.encoders import load_encoder\n\n"
                f'base = load_encoder("{learnware.base_model}", fresh=True)  # the installed base, offline\n'
                f'model = PeftModel.from_pretrained(base.model, "{folder}/adapter")\n'
                "# the dock reads it through its label-name head: app.ml.runners.PeftLoraRunner",
            )
        )
    elif fmt == "hf-seqcls":
        snippets.append(
            (
                "transformers",
                "Load it with transformers",
                f"# unzip {folder}.zip first\n"
                "from transformers import AutoModelForSequenceClassification, AutoTokenizer\n\n"
                f'tokenizer = AutoTokenizer.from_pretrained("{folder}/model")\n'
                f'model = AutoModelForSequenceClassification.from_pretrained("{folder}/model", use_safetensors=True)\n'
                'logits = model(**tokenizer(["an example text"], return_tensors="pt")).logits',
            )
        )
    elif fmt == "pooled-linear":
        snippets.append(
            (
                "pooled-linear",
                "Apply the linear map after the base's pooling",
                f"# unzip {folder}.zip first; W maps the mean-pooled embeddings of the base {learnware.base_model}\n"
                "from safetensors.torch import load_file\nfrom app.ml.encoders import embed_texts, load_encoder\n\n"
                f'base = load_encoder("{learnware.base_model}")  # the installed base, offline\n'
                f'weight = load_file("{folder}/linear/linear.safetensors")["weight"]\n'
                'embeddings = embed_texts(base, ["an example text"]) @ weight.T\n'
                "# the dock reads them through its label-name head: app.ml.runners.PooledLinearRunner",
            )
        )
    elif fmt == "onnx":
        snippets.append(
            (
                "onnx",
                "Run it with onnxruntime",
                f"# unzip {folder}.zip first\nimport numpy as np\nimport onnxruntime as ort\n\n"
                f'session = ort.InferenceSession("{folder}/model.onnx")\n'
                "name = session.get_inputs()[0].name\n"
                'labels, *rest = session.run(None, {name: np.array([["an example text"]], dtype=object)})',
            )
        )
    return snippets
