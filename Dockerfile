# stream-release: the streaming worker (CONTRACT.md §5) and the rest of the command line.
#
#   docker build -t stream-release .
#   docker run --rm stream-release bounds --l 2 --k-prime 3
#
# docker-compose.yml runs it with Kafka, Redis, Prometheus and Grafana. The configuration is
# mounted at /config, the public release files go to the /archive volume and the private ones
# to /archive-private (mode 0700), and the worker serves
# /metrics and /health on port 9464 (SR_SERVICE_METRICS_PORT).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin app \
    && mkdir -p /archive /archive-private /config \
    && chown app /archive /archive-private \
    && chmod 700 /archive-private

# Only what the package needs (see .dockerignore); the sources are removed after installing.
COPY pyproject.toml README.md /tmp/src/
COPY stream_release /tmp/src/stream_release
RUN pip install /tmp/src && rm -rf /tmp/src

USER app
WORKDIR /home/app
# numba compiles the grouping kernels once, here, into a cache the worker loads at start.
ENV NUMBA_CACHE_DIR=/home/app/.cache/numba \
    SR_SERVICE_METRICS_HOST=0.0.0.0
RUN python -c "from stream_release.pipeline.warm_up import warm_up; warm_up()"

VOLUME ["/archive", "/archive-private"]
EXPOSE 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://localhost:%s/health' % os.environ.get('SR_SERVICE_METRICS_PORT', '9464'), timeout=4)"]

ENTRYPOINT ["stream-release"]
CMD ["worker", "--config", "/config/stream-release.toml"]
