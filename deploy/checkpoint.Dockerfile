# The checkpoint service: checkpoint revisions, anchors checked against the
# committed stream, recovery plans. Keep exactly one running per ledger.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
RUN pip install --no-cache-dir .
VOLUME ["/data"]
ENV LANELEDGER_CHECKPOINT_DATA=/data \
    LANELEDGER_HTTP_HOST=0.0.0.0 \
    LANELEDGER_CHECKPOINT_PORT=8473
EXPOSE 8473
STOPSIGNAL SIGTERM
CMD ["python", "-m", "services.checkpoint"]
