# syntax=docker/dockerfile:1
# trainyard-worker for CPU jobs on Debian 12, as a non-root user (docs/install.md,
# "Docker"). The engine is the one every build makes: LibTorch 2.11 from the pinned
# PyPI torch wheel (deploy/python-requirements.txt), a CUDA build that trains on CPU with
# Gloo; its CUDA runtime libraries come along (LibTorch links them) and are never used
# without a GPU. worker-cuda.Dockerfile adds what GPUs need at run time.
#   docker build -f deploy/docker/worker-cpu.Dockerfile -t trainyard-worker-cpu:0.9.0 .
#
# Build stage: the CUDA toolkit (for LibTorch's CMake config), the installer CI runs
# (deploy/install-deps.sh), the same CMake configure and build, and cpack
# (deploy/install.cmake). Runtime stage: debian:12-slim with the wheel's libraries at the
# build stage's paths and the trainyard-worker package (trainyard-worker, and
# trainyard-rank, trainyard-train and trainyard-bench beside it) installed by apt with
# its runtime libraries.
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
 && cmake --build /build --target trainyard-worker trainyard-rank trainyard-train trainyard-bench \
 && cd /build && cpack -D "CPACK_COMPONENTS_ALL=worker" -B /pkg \
 && ls -l /pkg/*.deb

FROM ${RUNTIME_IMAGE} AS worker-cpu
ARG TORCH_SITE
ARG TRAINYARD_UID=10001
RUN groupadd --system --gid "${TRAINYARD_UID}" trainyard \
 && useradd --system --uid "${TRAINYARD_UID}" --gid trainyard --home-dir /nonexistent \
      --no-create-home --shell /usr/sbin/nologin trainyard
# LibTorch and its CUDA runtime at the build stage's paths: the engine's programs name
# torch/lib in their RUNPATH, and the wheel's libraries find the nvidia-* ones relative
# to themselves. Only the libraries: the venv's Python packages are not needed to run.
COPY --from=build ${TORCH_SITE}/torch/lib ${TORCH_SITE}/torch/lib
COPY --from=build ${TORCH_SITE}/nvidia ${TORCH_SITE}/nvidia
COPY --from=build /pkg/trainyard-worker_*.deb /tmp/pkg/
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/pkg/trainyard-worker_*.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/pkg \
 && install -d -o trainyard -g trainyard -m 0750 /var/lib/trainyard-worker /etc/trainyard/tls
USER ${TRAINYARD_UID}:${TRAINYARD_UID}
# Each attempt's files (config, flight-recorder dumps, artifacts awaiting upload).
VOLUME /var/lib/trainyard-worker
# Rendezvous stores of the ranks hosted here (--rendezvous-ports). Gloo's own
# connections use ephemeral ports, so a job spanning machines needs --network host and
# --address set to the host's address (docs/install.md).
EXPOSE 29500-29999
# No HEALTHCHECK: the worker serves no port; it reconnects to the controller by itself,
# and the controller reports a worker lost after --heartbeat-timeout (`trainyard workers`).
ENTRYPOINT ["trainyard-worker", "--work-dir", "/var/lib/trainyard-worker"]
# The controller, slots and name have no sensible default: give them as arguments, e.g.
#   docker run --network host trainyard-worker-cpu:0.9.0 --controller ctl:7070 --slots 4 \
#     --name node-1 --address 10.0.0.5 --tls-cert ... --tls-key ... --tls-ca ...
CMD ["--help"]
