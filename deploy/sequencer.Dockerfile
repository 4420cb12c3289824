# The sequencer: the sole writer of the ledger. Keep exactly one running per ledger.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
RUN pip install --no-cache-dir .
VOLUME ["/data"]
ENV LANELEDGER_DB=/data/ledger.db \
    LANELEDGER_HTTP_HOST=0.0.0.0 \
    LANELEDGER_SEQUENCER_PORT=8470
EXPOSE 8470
STOPSIGNAL SIGTERM
CMD ["python", "-m", "services.sequencer"]
