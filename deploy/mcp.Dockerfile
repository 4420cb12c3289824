# The MCP server (spec/mcp.md): agents read the ledger over streamable HTTP at
# /mcp, each with its own bearer token, passed through to the tail. It holds no
# state. Built from the repository root: docker build -f deploy/mcp.Dockerfile .
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
RUN pip install --no-cache-dir . \
 && useradd --system --uid 10001 --no-create-home laneledger
USER laneledger
ENV LANELEDGER_MCP_LISTEN=0.0.0.0:8475 \
    LANELEDGER_MCP_TAIL_URL=http://tail:8471
EXPOSE 8475
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ['LANELEDGER_MCP_LISTEN'].rpartition(':')[2] + '/healthz', timeout=2)"]
CMD ["python", "-m", "laneledger.cli", "mcp", "--serve"]
