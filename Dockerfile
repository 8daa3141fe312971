# syntax=docker/dockerfile:1
# kube-reloader image: `make image` (IMAGE=... to name it).
#
# Build stage: the same release build as `make binary` (tests/chart.rs checks that the two cargo
# commands stay identical). glibc build on Debian bookworm; the runtime image is distroless
# cc-debian12, the same Debian release, so the glibc the binary links against is there. No
# OpenSSL: TLS is rustls.
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
# Only what the workspace needs to resolve and build (see .dockerignore).
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
COPY loadtest/Cargo.toml ./loadtest/Cargo.toml
COPY loadtest/src ./loadtest/src
COPY loadtest/apiproxy/Cargo.toml ./loadtest/apiproxy/Cargo.toml
COPY loadtest/apiproxy/src ./loadtest/apiproxy/src
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin kube-reloader && \
    install -m 0755 target/release/kube-reloader /kube-reloader

# Runtime: no shell, no package manager; runs as nobody (65534) with a read-only root filesystem
# (kube-reloader writes nothing to disk).
# `make image-local` builds the same runtime stage without a registry: everything from here on
# but the COPY --from=build line is copied into its FROM-scratch Containerfile.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /kube-reloader /kube-reloader
ARG VERSION=dev
LABEL org.opencontainers.image.title="kube-reloader" \
      org.opencontainers.image.description="Drop-in Rust replacement for stakater/Reloader" \
      org.opencontainers.image.source="https://github.com/kube-reloader/kube-reloader" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
USER 65534:65534
# /metrics, /live, /ready
EXPOSE 9090
ENTRYPOINT ["/kube-reloader"]
