"""The dock's one settings object. Every default serves the embedded mode on one machine.

Production is configured by environment variables with the ``PAVEDOCK_`` prefix, for example
``PAVEDOCK_DATABASE_URL=postgresql+psycopg2://…``, ``PAVEDOCK_BROKER_URL=redis://…``,
``PAVEDOCK_STORAGE_BACKEND=s3``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from app.ml.packages import PackageLimits
    from app.ml.spec_space import SpecSpaceConfig

Environment = Literal["development", "testing", "production"]
StorageBackend = Literal["local", "s3"]
VectorEngineName = Literal["faiss", "pgvector"]
VectorEngineIndex = Literal["hnsw", "ivfflat", "exact"]

_DEFAULT_S3_SECRET = "change-me"


def _default_datasets_dir() -> Path | None:
    candidate = Path("../shared/datasets").resolve()
    return candidate if candidate.is_dir() else None


def _default_spaces() -> list[dict[str, Any]]:
    return [{}]


class Settings(BaseSettings):
    """Configuration of the API, the workers and the CLI (env prefix ``PAVEDOCK_``)."""

    model_config = SettingsConfigDict(env_prefix="PAVEDOCK_", env_file=".env", extra="ignore")

    environment: Environment = "development"
    data_dir: Path = Path("var")
    """Root of the embedded mode's state: SQLite file, artifacts, indexes, broker folders."""

    database_url: str = ""
    """SQLAlchemy URL; empty means ``sqlite:///<data_dir>/dock.sqlite``."""
    broker_url: str = ""
    """Celery broker; empty means kombu's filesystem transport under ``<data_dir>/broker``."""

    storage_backend: StorageBackend = "local"
    artifacts_dir: Path | None = None
    """Local artifact store; empty means ``<data_dir>/artifacts``."""
    s3_bucket: str = ""
    s3_prefix: str = "artifacts/"
    s3_endpoint_url: str | None = None
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None

    index_dir: Path | None = None
    """Persisted FAISS indexes, one file per spec space; empty means ``<data_dir>/index``."""
    index_save_interval_s: float = 10.0
    """An API process writes its index file at most this often (and at shutdown)."""
    vector_engine: VectorEngineName = "faiss"
    """Where the specs are searched: ``faiss``, the embedded index in every process (default), or
    ``pgvector``, a PostgreSQL server with the pgvector extension shared by all of them."""
    vector_engine_url: str = ""
    """The pgvector server (``postgresql://user:password@host:5432/db``); needed for ``pgvector``."""
    vector_engine_index: VectorEngineIndex = "hnsw"
    """pgvector's index on the specs: ``hnsw``, ``ivfflat`` or ``exact`` (a full scan, no index)."""
    vector_engine_ef_search: int = Field(default=1000, ge=10, le=1000)
    """HNSW candidates per query (``hnsw.ef_search``, pgvector's most: recall@10 0.976 at 100k on
    the simulated market, 0.92 at 400; docs/benchmarks/scale.md); IVFFlat probes a tenth of it."""
    vector_engine_timeout_s: float = Field(default=5.0, gt=0, le=300)
    """Connecting to the engine and each statement give up after this long (then a 503)."""

    datasets_dir: Path | None = Field(default_factory=_default_datasets_dir)
    """The real datasets (benchmarks, the demo); default ``../shared/datasets`` where it exists."""
    cache_dir: Path = Path(".cache/pavedock")
    """What the benchmarks and the demo train is kept here between runs."""
    log_level: str | None = None
    """Logging level; unset: WARNING for the commands, INFO for ``pavedock serve``'s server."""

    spec_spaces: list[dict[str, Any]] = Field(default_factory=_default_spaces)
    """Spec space configs (JSON), the first is the default; ``[{}]`` is the default MiniLM space."""

    max_upload_bytes: int = 256 * 1024 * 1024
    """Largest request body on upload routes (a package zip); refused with 413 while streaming."""
    package_max_unpacked_bytes: int = Field(default=1024**3, ge=1)
    """Most bytes one package may unpack to, in the API and in each worker stage (the sum of its
    members, declared and counted while extracting); a deployment serving larger models raises it."""
    package_max_ratio: float = 100.0
    """Largest uncompressed/compressed ratio of one member of a package."""
    package_max_total_ratio: float = 20.0
    """Largest ratio for the whole package, once it unpacks to over 64 MiB (a bomb spread thin)."""
    package_max_members: int = 2000
    max_spec_upload_bytes: int = 4 * 1024 * 1024
    max_task_examples: int = 1024
    max_text_chars: int = 4000
    spec_fit_inputs: int = 256
    """A learnware's spec is fitted to its predictions on at most this many declared inputs."""
    validation_inputs: int = 512
    """Validation runs the model on at most this many declared inputs."""
    recompute_uploaded_specs: bool = True
    """Fit every learnware's spec to its own predictions, also where the developer uploaded one
    (their agreement is logged). Off, an uploaded spec is trusted once its space, shape and values
    pass: a copied or forged spec then describes the model, which is how a flood of junk learnwares
    with a popular task's spec would take that task's first places (matches say `spec_recomputed`)."""
    review_required: bool = False
    """Validated learnwares wait for an admin's approval before they are indexed."""
    keep_task_examples: bool = False
    """Keep a user's few-shot examples after their spec is computed (default: erase them)."""
    shot_check_k: int = Field(default=5, ge=0)
    """While it holds a task's examples, the dock runs this many of the top matches on them and
    ranks those by the log-probability they gave the examples' labels (0: rank by spec alone)."""
    shot_check_k_unnamed: int = Field(default=20, ge=0)
    """How many it runs when no match answers the task's labels by name (codes, another language):
    the spec then says less, so the check looks wider (`app.ml.ranking.SHOT_CHECK_K_UNNAMED`)."""
    shot_check_loaded_models: int = Field(default=24, ge=0)
    """A worker process keeps this many of the models it checked last loaded, so a task that checks
    them again does not fetch, extract and load them again (0: load each time). A MiniLM-sized
    classifier holds ~90 MB, classifiers on one same encoder (linear probes) hold it once
    (`app.ml.runners.shared_body`); a TF-IDF ONNX model a few MB; LoRA and pooled-linear models
    share their base (docs/benchmarks/task-latency.md)."""
    shot_check_warm_models: int = Field(default=24, ge=0)
    """At start, a worker process loads in the background the models its dock's recent tasks
    checked most often, this many at most (and no more than ``shot_check_loaded_models``: by
    default what it would hold after a while anyway), so the first tasks after a restart do not
    pay the loads (about 10 s in the background for 23 models on this CPU; 0: none). The check
    runs where a few-shot task's spec is fitted (the ``gpu`` queue's `task.fit` stage), so a
    worker of the ``cpu`` queue alone does not warm up."""

    job_max_attempts: int = 3
    job_heartbeat_s: float = 5.0
    job_stale_after_s: float = 60.0
    """A running job without a heartbeat for this long is re-queued (or failed at max attempts)."""
    job_redispatch_after_s: float = 600.0
    """A queued job no worker claimed for this long is sent to the broker again."""
    job_republish_after_s: float = 10.0
    """A queued job whose message the broker never took (it was down) is sent again this long
    after its dispatch, once the broker answers."""
    reaper_interval_s: float = 15.0

    worker_concurrency: int = 1
    worker_queues: str = "gpu,cpu"
    torch_threads: int | None = Field(default=None, ge=1)
    """Torch threads per process on a CPU-only host; unset: every core. Several torch processes
    sharing the cores (API, workers, tests) run many times faster with 1 each."""

    host: str = "127.0.0.1"
    port: int = 8000
    cors_origins: list[str] = Field(default_factory=list)

    # The admin dashboard and Flower.
    flower_url: str = "http://127.0.0.1:5555"
    """Flower as an admin's browser reaches it (linked from ``/admin``); empty hides the link."""
    flower_port: int | None = Field(default=None, ge=1, le=65535)
    """Flower's port, replacing the one in ``flower_url`` (``PAVEDOCK_FLOWER_PORT=5556``)."""
    serve_flower: bool = True
    """``pavedock serve`` starts Flower on ``flower_url``'s host and port (a local URL only)."""
    admin_sample_interval_s: float = Field(default=10.0, gt=0)
    """How often request counts and latencies are sampled for the dashboard's charts."""
    admin_history_samples: int = Field(default=360, ge=2)
    """Samples kept in memory per API process (360 × 10 s = one hour)."""
    worker_inspect_timeout_s: float = Field(default=3.0, gt=0)
    """How long a remote-control broadcast waits for workers to answer (the embedded broker
    polls its folders, so its workers answer in one to two seconds)."""
    worker_inspect_interval_s: float = Field(default=10.0, gt=0)
    """Workers are asked what they run at most this often, and only while someone looks."""

    # The web pages' sessions.
    web_session_secret: SecretStr | None = None
    """Signs session cookies and CSRF tokens. Unset: a random secret is made once and kept in
    ``<data_dir>/web-session.key`` (enough for API processes that share a data folder; set it
    when API processes run on several machines)."""
    web_session_hours: float = Field(default=12.0, gt=0, le=24 * 30)
    """A sign-in lasts this long (the key's own expiry and revocation end it sooner)."""
    web_cookie_secure: bool | None = None
    """Send the session cookie over HTTPS only; unset: on in production, off otherwise."""
    web_page_size: int = Field(default=12, ge=1, le=100)
    """Learnware cards per page."""

    @field_validator("torch_threads", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("flower_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        value = value.strip()
        if value and urlsplit(value).scheme not in ("http", "https"):
            raise ValueError(f"PAVEDOCK_FLOWER_URL must be an http(s) URL, not {value!r}")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _flower_port(self) -> Settings:
        if self.flower_port is not None and self.flower_url:
            url = urlsplit(self.flower_url)
            host = url.hostname or "127.0.0.1"
            host = f"[{host}]" if ":" in host else host
            self.flower_url = urlunsplit(url._replace(netloc=f"{host}:{self.flower_port}")).rstrip("/")
        return self

    @model_validator(mode="after")
    def _refuse_default_secrets(self) -> Settings:
        if self.environment == "development":
            return self
        if self.storage_backend == "s3" and self.s3_secret_access_key == _DEFAULT_S3_SECRET:
            raise ValueError(
                "PAVEDOCK_S3_SECRET_ACCESS_KEY is the placeholder 'change-me' outside development"
            )
        for url_name in ("database_url", "broker_url", "vector_engine_url"):
            url = getattr(self, url_name)
            if ":changethis@" in url or ":change-me@" in url:
                raise ValueError(
                    f"PAVEDOCK_{url_name.upper()} holds a placeholder password outside development"
                )
        return self

    @model_validator(mode="after")
    def _engine_needs_url(self) -> Settings:
        if self.vector_engine == "pgvector" and not self.vector_engine_url:
            raise ValueError("PAVEDOCK_VECTOR_ENGINE=pgvector needs PAVEDOCK_VECTOR_ENGINE_URL")
        return self

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'dock.sqlite').resolve()}"

    @property
    def resolved_broker_url(self) -> str:
        # The filesystem transport ignores the host, but kombu warns "No hostname was supplied"
        # on every connection without one: name the host it would assume.
        return self.broker_url or "filesystem://localhost/"

    @property
    def broker_dir(self) -> Path:
        return self.data_dir / "broker"

    @property
    def resolved_artifacts_dir(self) -> Path:
        return self.artifacts_dir or self.data_dir / "artifacts"

    @property
    def scratch_dir(self) -> Path:
        """Uploads and extracted packages while they are checked (same disk as the artifacts)."""
        return self.data_dir / "tmp"

    @property
    def resolved_index_dir(self) -> Path:
        return self.index_dir or self.data_dir / "index"

    @property
    def space_configs(self) -> list[SpecSpaceConfig]:
        from app.ml.spec_space import config_from_dict  # torch-heavy: only when spaces are needed

        configs = [config_from_dict(c) for c in self.spec_spaces]
        if not configs:
            raise ValueError("PAVEDOCK_SPEC_SPACES must name at least one spec space")
        return configs

    def package_limits(self) -> PackageLimits:
        """What extracting a learnware package may take (unpacked bytes, members, ratio)."""
        from app.ml.packages import PackageLimits

        return PackageLimits(
            max_total_bytes=self.package_max_unpacked_bytes,
            max_members=self.package_max_members,
            max_ratio=self.package_max_ratio,
            max_total_ratio=self.package_max_total_ratio,
        )

    def ensure_dirs(self) -> None:
        """Create the embedded mode's folders (harmless in production)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.resolved_index_dir.mkdir(parents=True, exist_ok=True)
        self.scratch_dir.mkdir(parents=True, exist_ok=True)
        if self.storage_backend == "local":
            self.resolved_artifacts_dir.mkdir(parents=True, exist_ok=True)
        if not self.broker_url:
            for sub in ("queue", "processed", "control"):
                (self.broker_dir / sub).mkdir(parents=True, exist_ok=True)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings (cached; tests build their own ``Settings`` and pass it on)."""
    return Settings()
