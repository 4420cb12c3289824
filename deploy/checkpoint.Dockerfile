# The checkpoint service: checkpoint revisions, anchors, recovery plans. Run one per ledger.
# Built from the repository root: docker build -f deploy/checkpoint.Dockerfile .
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
RUN pip install --no-cache-dir . \
 && useradd --system --uid 10001 --home-dir /data laneledger \
 && mkdir -p /data && chown laneledger /data
USER laneledger
VOLUME ["/data"]
ENV LANELEDGER_CHECKPOINT_DATA=/data \
    LANELEDGER_HTTP_HOST=0.0.0.0 \
    LANELEDGER_CHECKPOINT_PORT=8473
EXPOSE 8473
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ['LANELEDGER_CHECKPOINT_PORT'] + '/healthz', timeout=2)"]
CMD ["python", "-m", "laneledger.services.checkpoint"]
