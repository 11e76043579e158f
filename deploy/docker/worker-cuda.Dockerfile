# syntax=docker/dockerfile:1
# trainyard-worker with the engine built against a CUDA LibTorch 2.x and NCCL (the
# official PyTorch wheels), on Debian 12, as a non-root user (docs/install.md, "Docker";
# docs/cuda.md for the engine on CUDA).
#   docker build -f deploy/docker/worker-cuda.Dockerfile -t trainyard-worker-cuda:0.9.0 .
#   docker run --gpus all --network host --ipc host trainyard-worker-cuda:0.9.0 --controller ...
#
# Why Debian 12 plus wheels rather than an Ubuntu CUDA or PyTorch image: the worker daemon
# is built from Debian 12's gRPC, protobuf and abseil by the installer CI runs
# (deploy/install-deps.sh), which is Debian's; the engine is the only part that needs
# CUDA. So the build stage adds the CUDA toolkit from NVIDIA's Debian 12 repository
# (nvcc and the libraries TorchConfig.cmake looks for) and LibTorch from the PyTorch
# wheel (torch 2.x with its nvidia-* wheels: CUDA runtime, cuBLAS, cuDNN, NCCL), and
# configures the engine with CMAKE_PREFIX_PATH=torch.utils.cmake_prefix_path and
# NCCL_ROOT at the nvidia-nccl wheel's nccl.h, as deploy/gpu-check.sh does. The runtime stage
# needs no toolkit: the wheels' libraries are copied in and the GPU driver comes from
# the host (NVIDIA Container Toolkit, --gpus).
#
# The versions go together: TORCH_CUDA is the wheel index (cu130 = CUDA 13.0) and
# CUDA_APT the matching toolkit package suffix. docs/cuda.md's results are for torch
# 2.11.0+cu130 with NCCL 2.28.9.
ARG DEBIAN_IMAGE=debian:12
ARG RUNTIME_IMAGE=debian:12-slim
ARG TORCH_VERSION=2.11.0
ARG TORCH_CUDA=cu130
ARG CUDA_APT=13-0
# Where the wheels live, in both stages (python3.11 is Debian 12's).
ARG TORCH_SITE=/opt/torch/lib/python3.11/site-packages

FROM ${DEBIAN_IMAGE} AS build
ARG TORCH_VERSION
ARG TORCH_CUDA
ARG CUDA_APT
ARG TORCH_SITE
WORKDIR /src
COPY deploy/install-deps.sh deploy/install-deps.sh
RUN bash deploy/install-deps.sh && rm -rf /var/lib/apt/lists/*
ADD https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb /tmp/
RUN dpkg -i /tmp/cuda-keyring_1.1-1_all.deb \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      "cuda-toolkit-${CUDA_APT}" python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/torch \
 && /opt/torch/bin/pip install --no-cache-dir "torch==${TORCH_VERSION}" \
      --index-url "https://download.pytorch.org/whl/${TORCH_CUDA}" \
 && test -d "${TORCH_SITE}/torch/lib" \
 && find "${TORCH_SITE}/nvidia" -name nccl.h | grep -q . \
 && /opt/torch/bin/python -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
# The wheels' libraries for the loader (and for dpkg-shlibdeps in cpack below): torch/lib
# and every folder of the nvidia-* wheels that holds a shared library (their layout
# differs between CUDA 12 and 13 wheels, so it is searched, as gpu-check.sh does).
RUN { echo "${TORCH_SITE}/torch/lib"; find "${TORCH_SITE}/nvidia" -name 'lib*.so*' -printf '%h\n' | sort -u; } \
      > /etc/ld.so.conf.d/trainyard-torch.conf \
 && ldconfig
COPY . .
# -DGLOO_LIBRARY= : link no system libgloo; the wheel's LibTorch carries its own Gloo
# (its headers are Debian's libgloo-dev, as in docs/cuda.md). TORCH_CUDA_ARCH_LIST only
# spares TorchConfig.cmake probing for a GPU here; the engine compiles no CUDA code.
# The grep stops the build unless the engine found nccl.h (USE_C10D_NCCL): without it
# the engine would build but refuse resources.device=cuda.
# libcuda.so.1 is the driver's, from the host at run time: a stub stands in for
# dpkg-shlibdeps should anything link it.
RUN --mount=type=cache,target=/root/.cache/ccache \
    export PATH=/usr/local/cuda/bin:$PATH TORCH_CUDA_ARCH_LIST="8.0;9.0" \
 && TORCH_PREFIX=$(/opt/torch/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)') \
 && NCCL_H=$(find "${TORCH_SITE}/nvidia" -name nccl.h | head -1) \
 && NCCL_SO=$(find "${TORCH_SITE}/nvidia" -name 'libnccl.so*' | sort | head -1) \
 && cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINYARD_BUILD_TESTS=OFF \
      "-DCMAKE_PREFIX_PATH=${TORCH_PREFIX}" "-DNCCL_ROOT=$(dirname "$(dirname "${NCCL_H}")")" \
      "-DNCCL_LIBRARY=${NCCL_SO}" -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DGLOO_LIBRARY= \
 && grep -q "USE_C10D_NCCL" /build/build.ninja \
 && cmake --build /build --target trainyard-worker trainyard-rank trainyard-train trainyard-bench \
 && mkdir -p /opt/cuda-stubs && ln -sf /usr/local/cuda/lib64/stubs/libcuda.so /opt/cuda-stubs/libcuda.so.1 \
 && cd /build && LD_LIBRARY_PATH=/opt/cuda-stubs:/usr/local/cuda/lib64 cpack -D "CPACK_COMPONENTS_ALL=worker" -B /pkg \
 && ls -l /pkg/*.deb

FROM ${RUNTIME_IMAGE} AS worker-cuda
ARG TORCH_SITE
ARG TRAINYARD_UID=10001
RUN groupadd --system --gid "${TRAINYARD_UID}" trainyard \
 && useradd --system --uid "${TRAINYARD_UID}" --gid trainyard --home-dir /nonexistent \
      --no-create-home --shell /usr/sbin/nologin trainyard
# LibTorch's libraries and the nvidia-* wheels (CUDA runtime, cuBLAS, cuDNN, NCCL, ...),
# at the build stage's paths: libtorch_cuda.so finds its CUDA libraries relative to
# itself, and the engine's programs find LibTorch and NCCL through ld.so.conf.
COPY --from=build ${TORCH_SITE}/torch/lib ${TORCH_SITE}/torch/lib
COPY --from=build ${TORCH_SITE}/nvidia ${TORCH_SITE}/nvidia
COPY --from=build /etc/ld.so.conf.d/trainyard-torch.conf /etc/ld.so.conf.d/trainyard-torch.conf
COPY --from=build /pkg/trainyard-worker_*.deb /tmp/pkg/
RUN ldconfig \
 && apt-get update \
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
