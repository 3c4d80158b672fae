# syntax=docker/dockerfile:1
# workload-resizer: one image for both programs.
#   webhook:    <image>                      (python -m app ...)
#   reconciler: <image> reconciler ...       (python -m reconciler ...)
# The chart sets the arguments of each; see chart/templates/*-deployment.yaml.
#
# Build: docker build -t workload-resizer:dev .
#    or: make image (buildah, on a Debian base built locally: hack/image; PYTHON_IMAGE is
#        the only base it changes)
# tests/tools/test_dockerfile.py lints this file with hadolint and replays the
# builder's COPY and pip steps (without docker) to prove the image installs and runs.

ARG PYTHON_IMAGE=python:3.11-slim
# The runtime stage's base: the builder's unless a smaller one with the same Python is given
# (hack/image passes its base without pip, setuptools and wheels).
ARG RUNTIME_IMAGE=${PYTHON_IMAGE}

# ---------------------------------------------------------------- builder
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PIP_NO_INPUT=1
WORKDIR /src
# README* may match nothing (pyproject names README.md; the build only warns without it).
COPY pyproject.toml README* ./
COPY resizer/ resizer/
COPY app/ app/
COPY reconciler/ reconciler/
COPY kube/ kube/
COPY commands/ commands/
COPY certs/ certs/
COPY ops/ ops/
# Every dependency ships binary wheels for CPython 3.11, so no compiler is needed.
# The venv has no pip of its own: the image's pip installs into it (--python), so the
# runtime image carries no installer. pip byte-compiles, so a read-only root works.
# Then the SBOM of the venv's Python packages (CycloneDX JSON, in the venv's share/doc),
# written by cyclonedx-bom from a tool venv that stays in the builder.
RUN python -m venv --without-pip /opt/venv \
 && python -m pip --python /opt/venv/bin/python install --no-cache-dir --only-binary=:all: . \
 && /opt/venv/bin/python -m app --help >/dev/null \
 && /opt/venv/bin/python -m reconciler --help >/dev/null \
 && python -m venv sbom-tool \
 && sbom-tool/bin/python -m pip install --no-cache-dir --only-binary=:all: cyclonedx-bom==7.5.0 \
 && mkdir -p /opt/venv/share/doc/workload-resizer \
 && sbom-tool/bin/cyclonedx-py environment --pyproject pyproject.toml --output-reproducible \
      --output-file /opt/venv/share/doc/workload-resizer/sbom.cdx.json /opt/venv/bin/python

# ---------------------------------------------------------------- runtime
FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="workload-resizer" \
      org.opencontainers.image.description="Right-size Kubernetes pods in place for the machine family they land on" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=builder /opt/venv /opt/venv
# Numeric non-root user (distroless "nonroot"), so runAsNonRoot can verify it.
USER 65532:65532
# webhook HTTPS; reconciler metrics and probes
EXPOSE 8443 8080 8081
ENTRYPOINT ["python", "-m"]
CMD ["app"]
