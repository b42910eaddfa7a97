# syntax=docker/dockerfile:1
#
# eosflow container image (used by docker-compose.yml). Needs BuildKit (the
# default builder of current Docker) for the cache mounts.

############################
# Builder
############################
FROM rust:1.95-bookworm AS builder

# libclang-dev: bindgen for rocksdb; cmake/pkg-config/libssl-dev/zlib1g-dev:
# bundled librdkafka with TLS and zlib.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        libclang-dev cmake pkg-config libssl-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# The registry and target dir live in BuildKit cache mounts, so they are not in
# any layer: copy the binary out of the cached target dir in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --package eosflow-cli --bin eosflow \
 && install -D -m 0755 target/release/eosflow /out/eosflow

############################
# Runtime
############################
FROM debian:bookworm-slim

# libssl3: OpenSSL for librdkafka TLS and native-tls; libstdc++6 (RocksDB) and
# zlib1g are already in the base image, listed to make the dependency explicit.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 libstdc++6 zlib1g \
 && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 eosflow \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/eosflow --no-create-home \
        --shell /usr/sbin/nologin eosflow \
 && install -d -m 0750 -o 10001 -g 10001 /var/lib/eosflow

COPY --from=builder /out/eosflow /usr/local/bin/eosflow

ENV EOSFLOW_STATE_DIR=/var/lib/eosflow
VOLUME ["/var/lib/eosflow"]
WORKDIR /var/lib/eosflow
USER 10001:10001
EXPOSE 9464

ENTRYPOINT ["eosflow"]
