# The metrics service: folds the committed ledger into Prometheus metrics.
# Its SQLite file (folded state + position) lives on the /data volume, so a
# restarted container neither loses nor double-counts anything.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
RUN pip install --no-cache-dir .
VOLUME ["/data"]
ENV LANELEDGER_METRICS_DATA=/data \
    LANELEDGER_HTTP_HOST=0.0.0.0 \
    LANELEDGER_METRICS_PORT=8472
EXPOSE 8472
STOPSIGNAL SIGTERM
CMD ["python", "-m", "services.metrics"]
