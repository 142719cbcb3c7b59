# rsi-bot service and runner image.
#
#   docker build -t rsi-bot .                          # bot service (no torch)
#   docker build --build-arg EXTRAS=torch -t rsi-runner .   # runner with torch (CPU pin)
#   docker build --build-arg EXTRAS=torch --build-arg TORCH_SPEC="torch==2.5.1" \
#       --build-arg PIP_EXTRA="--index-url https://download.pytorch.org/whl/cu124" -t rsi-runner-cuda .
#
# The bot never imports torch at start-up, so the service image stays small.
FROM python:3.11-slim AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

RUN apt-get update \
 && apt-get install -y --no-install-recommends git ca-certificates tini \
 && rm -rf /var/lib/apt/lists/*

ARG EXTRAS="postgres"
ARG TORCH_SPEC="torch==2.13.0"
ARG PIP_EXTRA=""

WORKDIR /opt/rsi-bot
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY harness ./harness
COPY verifier ./verifier
COPY kernels ./kernels
RUN if echo "$EXTRAS" | grep -q torch; then pip install $PIP_EXTRA "$TORCH_SPEC"; fi \
 && pip install ".[${EXTRAS}]"

RUN useradd --create-home --uid 1000 rsi
USER rsi
WORKDIR /home/rsi

ENV RSI_DATABASE_URL=sqlite:////home/rsi/rsi.db
EXPOSE 8080
ENTRYPOINT ["tini", "--"]
CMD ["rsi", "serve", "--host", "0.0.0.0", "--port", "8080"]
