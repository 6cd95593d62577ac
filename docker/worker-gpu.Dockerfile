# The GPU worker: a CUDA runtime and its own CUDA build of torch; consumes the `gpu` queue
# (spec fitting). Build from the repository root:
#   docker build -f docker/worker-gpu.Dockerfile -t pavedock-worker-gpu .
FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    PAVEDOCK_DATA_DIR=/data \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.12 python3.12-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3.12 -m venv /opt/venv
WORKDIR /srv/pavedock
# The CUDA wheel of the same torch version (2.13.0+cu128 satisfies the lock's torch==2.13.0).
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128
COPY pyproject.toml requirements.lock README.md alembic.ini ./
COPY app ./app
COPY workers ./workers
COPY migrations ./migrations
RUN pip install -c requirements.lock -e . \
    && useradd --create-home --uid 10001 dock \
    && mkdir -p /data && chown dock:dock /data
USER dock
VOLUME ["/data"]
HEALTHCHECK --interval=30s --timeout=20s --start-period=120s --retries=3 \
    CMD celery -A workers.main inspect ping --destination "gpu@$HOSTNAME" --timeout 10 || exit 1
# One process per GPU: spec fitting holds the model on the device.
CMD ["sh", "-c", "exec celery -A workers.main worker --queues gpu --concurrency ${WORKER_CONCURRENCY:-1} --hostname gpu@$HOSTNAME --loglevel INFO"]
