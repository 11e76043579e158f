# syntax=docker/dockerfile:1
# trainyard-worker with the engine on LibTorch 2.11 with CUDA 13.0 and NCCL (the pinned
# PyPI torch wheel, deploy/python-requirements.txt), on Debian 12, as a non-root user
# (docs/install.md, "Docker"; docs/cuda.md for the engine on CUDA).
#   docker build -f deploy/docker/worker-cuda.Dockerfile -t trainyard-worker-cuda:0.9.0 .
#   docker run --gpus all --network host --ipc host trainyard-worker-cuda:0.9.0 --controller ...
#
# Build stage: the CUDA toolkit (for LibTorch's CMake config), the installer CI runs
# (deploy/install-deps.sh: Debian's packages and the venv with the pinned wheel), the same
# CMake configure and build, and cpack (deploy/install.cmake). Runtime stage:
# debian:12-slim with the wheel's libraries copied in at the same paths and the
# trainyard-worker package installed by apt; the GPU driver comes from the host (NVIDIA
# Container Toolkit, --gpus).
ARG DEBIAN_IMAGE=debian:12
ARG RUNTIME_IMAGE=debian:12-slim
# The toolkit package matching the wheel's CUDA (13.0).
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
# TORCH_CUDA_ARCH_LIST only spares TorchConfig.cmake probing for a GPU here; the engine
# compiles no CUDA code. The grep stops the build unless the engine found nccl.h
# (USE_C10D_NCCL): without it the engine would build but refuse resources.device=cuda.
RUN --mount=type=cache,target=/root/.cache/ccache \
    export PATH=/usr/local/cuda/bin:$PATH TORCH_CUDA_ARCH_LIST="8.0;9.0" \
 && cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINYARD_BUILD_TESTS=OFF \
 && grep -q "USE_C10D_NCCL" /build/build.ninja \
 && cmake --build /build --target trainyard-worker trainyard-rank trainyard-train trainyard-bench \
 && cd /build && cpack -D "CPACK_COMPONENTS_ALL=worker" -B /pkg \
 && ls -l /pkg/*.deb

FROM ${RUNTIME_IMAGE} AS worker-cuda
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
 && install -d -o trainyard -g trainyard -m 0750 /var/lib/trainyard-worker /etc/trainyard/tls \
 && ldd /usr/bin/trainyard-rank | { ! grep -v 'libcuda.so' | grep 'not found'; }
# The NVIDIA Container Toolkit mounts the driver and the GPUs given by --gpus (docker) or
# the device plugin (Kubernetes): libcuda for the ranks (compute) and libnvidia-ml.so.1
# (utility), which the worker loads to find, offer and sample those GPUs (--gpus all).
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER ${TRAINYARD_UID}:${TRAINYARD_UID}
VOLUME /var/lib/trainyard-worker
# Rendezvous stores of the ranks hosted here; NCCL and Gloo use further ports, so jobs
# spanning machines need --network host (and --ipc host or a large --shm-size for NCCL).
EXPOSE 29500-29999
# No HEALTHCHECK: the worker serves no port (see worker-cpu.Dockerfile).
ENTRYPOINT ["trainyard-worker", "--work-dir", "/var/lib/trainyard-worker"]
CMD ["--help"]
