# syntax=docker/dockerfile:1
# tfop operator image: docker build -t tfop:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim

# ---- build: the tfop wheel plus wheels of all its dependencies
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
# Only what the wheel is made of, so unrelated edits keep the cache.
# README.md* : setup.cfg reads it for the long description when present.
COPY pyproject.toml setup.cfg constraints.txt README.md* ./
COPY tfop ./tfop
COPY templates ./templates
COPY crds ./crds
COPY rbac ./rbac
# constraints.txt pins every dependency at the version the tests ran with, so two builds of
# one commit ship the same libraries (regenerate it as its header says).
RUN pip wheel --no-cache-dir --wheel-dir /wheels -c constraints.txt .

# ---- runtime: no build tools, no wheels left behind, not root
FROM ${PYTHON_IMAGE}
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Installed from the build stage's wheels only (--no-index): the image gets
# exactly the versions that were built and tested there. The bind mount keeps
# the wheels out of every layer. Templates, CRDs and rbac/ land in
# <data>/share/tfop (the install scheme's data directory), where
# tfop.children.resources looks for them.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels tfop \
 && groupadd --system --gid 65532 tfop \
 && useradd --system --uid 65532 --gid 65532 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin tfop
# Numeric, so Kubernetes can enforce runAsNonRoot without reading /etc/passwd
# (the Deployment from `tfop manifests` sets the same uid).
USER 65532:65532
WORKDIR /tmp
# /healthz and /readyz (`tfop run --health-probe-bind-address`, default :8081); /metrics (:8080).
EXPOSE 8081 8080
ENTRYPOINT ["tfop"]
CMD ["run", "--all-namespaces"]
