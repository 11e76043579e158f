# syntax=docker/dockerfile:1
# trainyard-controller on Debian 12, as a non-root user (docs/install.md, "Docker").
#   docker build -f deploy/docker/controller.Dockerfile -t trainyard-controller:0.9.0 .
#
# Build stage: the CUDA toolkit (for LibTorch's CMake config), the installer CI runs
# (deploy/install-deps.sh), then the same CMake configure and build, and cpack for the
# Debian packages (deploy/install.cmake). Runtime
# stage: debian:12-slim with the packages installed by apt, which brings their runtime
# libraries (the packages' Depends come from dpkg-shlibdeps). trainyard-worker's package
# comes along for trainyard-train, which the controller runs for jobs with
# compile.preflight=true (without it they are refused).
ARG DEBIAN_IMAGE=debian:12
ARG RUNTIME_IMAGE=debian:12-slim
ARG CUDA_APT=13-0
ARG TORCH_SITE=/opt/trainyard/venv/lib/python3.11/site-packages

FROM ${DEBIAN_IMAGE} AS build
ARG CUDA_APT
WORKDIR /src
# LibTorch's CMake config (the pinned torch wheel is a CUDA 13.0 build) looks for the
# CUDA toolkit at configure time, as on the build machines: NVIDIA's Debian 12
# repository has it. Nothing of it reaches the runtime stage.
ADD https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb /tmp/
RUN dpkg -i /tmp/cuda-keyring_1.1-1_all.deb \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "cuda-toolkit-${CUDA_APT}" ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# The dependency layer (Debian's packages, then the venv /opt/trainyard/venv with the
# pinned PyPI packages: the torch wheel is LibTorch) is cached until these files change.
COPY deploy/install-deps.sh deploy/install-python.sh deploy/python-requirements.txt deploy/
RUN bash deploy/install-deps.sh && rm -rf /var/lib/apt/lists/* /root/.cache/pip
COPY . .
RUN --mount=type=cache,target=/root/.cache/ccache \
    export PATH=/usr/local/cuda/bin:$PATH TORCH_CUDA_ARCH_LIST="8.0;9.0" \
 && cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINYARD_BUILD_TESTS=OFF \
 && cmake --build /build --target trainyard-controller trainyard-worker trainyard-rank trainyard-train trainyard-bench \
 && cd /build && cpack -D "CPACK_COMPONENTS_ALL=controller;worker" -B /pkg \
 && ls -l /pkg/*.deb

FROM ${RUNTIME_IMAGE} AS controller
ARG TORCH_SITE
# A fixed uid, so volumes and Kubernetes' runAsNonRoot see a number; the packages'
# postinst finds the user and leaves it.
ARG TRAINYARD_UID=10001
RUN groupadd --system --gid "${TRAINYARD_UID}" trainyard \
 && useradd --system --uid "${TRAINYARD_UID}" --gid trainyard --home-dir /nonexistent \
      --no-create-home --shell /usr/sbin/nologin trainyard
# LibTorch for the preflight's ranks (trainyard-train), as in the worker images.
COPY --from=build ${TORCH_SITE}/torch/lib ${TORCH_SITE}/torch/lib
COPY --from=build ${TORCH_SITE}/nvidia ${TORCH_SITE}/nvidia
COPY --from=build /pkg/trainyard-controller_*.deb /pkg/trainyard-worker_*.deb /tmp/pkg/
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      /tmp/pkg/trainyard-controller_*.deb /tmp/pkg/trainyard-worker_*.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/pkg \
 && install -d -o trainyard -g trainyard -m 0750 /var/lib/trainyard /etc/trainyard/tls
USER ${TRAINYARD_UID}:${TRAINYARD_UID}
# The SQLite store, uploaded artifacts and preflight specs.
VOLUME /var/lib/trainyard
# gRPC (JobService and WorkerService); Prometheus /metrics and the web UI when
# --metrics-listen and --web-listen serve them.
EXPOSE 7070 9464 8080
# The gRPC port accepts connections (a TCP connect: it works with TLS and tokens on).
# A CMD that listens elsewhere sets TRAINYARD_HEALTH_PORT.
ENV TRAINYARD_HEALTH_PORT=7070
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${TRAINYARD_HEALTH_PORT}"]
ENTRYPOINT ["trainyard-controller", "--data-dir", "/var/lib/trainyard"]
# Beyond loopback the controller requires TLS and a token file (or --insecure), so the
# default expects them mounted at /etc/trainyard (deploy/make-certs.sh makes the
# certificates; the files must be readable by uid 10001). /metrics and the web UI stay
# off: they are plain HTTP and beyond loopback need --insecure. docs/install.md shows a
# local trial with --insecure.
CMD ["--listen", "0.0.0.0:7070", \
     "--tls-cert", "/etc/trainyard/tls/controller.pem", "--tls-key", "/etc/trainyard/tls/controller.key", \
     "--tls-ca", "/etc/trainyard/tls/ca.pem", "--token-file", "/etc/trainyard/tokens"]
