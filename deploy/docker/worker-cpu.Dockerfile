# syntax=docker/dockerfile:1
# trainyard-worker with the CPU engine (Debian's LibTorch, Gloo) on Debian 12, as a
# non-root user (docs/install.md, "Docker").
#   docker build -f deploy/docker/worker-cpu.Dockerfile -t trainyard-worker-cpu:0.9.0 .
#
# Build stage: the installer CI runs (deploy/install-deps.sh), the same CMake configure
# and build, and cpack (deploy/install.cmake). Runtime stage: debian:12-slim with the
# trainyard-worker package (trainyard-worker, and trainyard-rank, trainyard-train and
# trainyard-bench beside it) installed by apt with its runtime libraries.
ARG DEBIAN_IMAGE=debian:12
ARG RUNTIME_IMAGE=debian:12-slim

FROM ${DEBIAN_IMAGE} AS build
WORKDIR /src
COPY deploy/install-deps.sh deploy/install-deps.sh
RUN bash deploy/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN --mount=type=cache,target=/root/.cache/ccache \
    cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINYARD_BUILD_TESTS=OFF \
 && cmake --build /build --target trainyard-worker trainyard-rank trainyard-train trainyard-bench \
 && cd /build && cpack -D "CPACK_COMPONENTS_ALL=worker" -B /pkg \
 && ls -l /pkg/*.deb

FROM ${RUNTIME_IMAGE} AS worker-cpu
ARG TRAINYARD_UID=10001
RUN groupadd --system --gid "${TRAINYARD_UID}" trainyard \
 && useradd --system --uid "${TRAINYARD_UID}" --gid trainyard --home-dir /nonexistent \
      --no-create-home --shell /usr/sbin/nologin trainyard
COPY --from=build /pkg/trainyard-worker_*.deb /tmp/pkg/
# libopenblas0-pthread: the BLAS install-deps.sh gives LibTorch; the package's Depends
# alone would settle for the reference BLAS.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      /tmp/pkg/trainyard-worker_*.deb libopenblas0-pthread \
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
