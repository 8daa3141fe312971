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
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin kube-reloader && \
    install -m 0755 target/release/kube-reloader /kube-reloader

# Runtime: no shell, no package manager; runs as nobody (65534) with a read-only root filesystem
# (kube-reloader writes nothing to disk).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /kube-reloader /kube-reloader
USER 65534:65534
# /metrics, /live, /ready
EXPOSE 9090
ENTRYPOINT ["/kube-reloader"]
