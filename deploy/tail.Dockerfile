# The tail service: SSE live tail, history, verification, blobs, the Korg surface and the console.
# Built from the repository root: docker build -f deploy/tail.Dockerfile .
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
ENV LANELEDGER_TAIL_DATA=/data \
    LANELEDGER_HTTP_HOST=0.0.0.0 \
    LANELEDGER_TAIL_PORT=8471
EXPOSE 8471
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ['LANELEDGER_TAIL_PORT'] + '/healthz', timeout=2)"]
CMD ["python", "-m", "laneledger.services.tail"]
