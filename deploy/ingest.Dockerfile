# The ingest service: HTTP writes of clients without NATS (Korg's tool calls and blob uploads).
# Built from the repository root: docker build -f deploy/ingest.Dockerfile .
# It keeps no state of its own: no volume.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
RUN pip install --no-cache-dir . \
 && useradd --system --uid 10001 --no-create-home laneledger
USER laneledger
ENV LANELEDGER_HTTP_HOST=0.0.0.0 \
    LANELEDGER_INGEST_PORT=8476
EXPOSE 8476
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ['LANELEDGER_INGEST_PORT'] + '/healthz', timeout=2)"]
CMD ["python", "-m", "laneledger.services.ingest"]
