# syntax=docker/dockerfile:1
# Builds the boxtable-operator image with Docker: docker build -t boxtable-operator .
# The same image as scripts/image.sh builds without a daemon (same files, user, entrypoint, cmd
# and labels; tests/suite/install/image.rs checks that the two agree).

FROM rust:1.95-slim-bookworm AS builder
WORKDIR /src

# Dependency layer: compile every dependency against stub sources, so this layer is rebuilt only
# when a manifest or the lock file changes. Explicit [[bench]], [[test]] and [[example]] sections
# are left out of the stub manifest because their sources are not copied yet.
COPY Cargo.toml Cargo.lock ./
COPY localapi/Cargo.toml localapi/Cargo.toml
RUN awk '/^\[/ { skip = ($0 ~ /^\[\[(bench|test|example)\]\]/) } !skip' Cargo.toml > Cargo.stub.toml \
 && mv Cargo.stub.toml Cargo.toml \
 && mkdir -p src localapi/src \
 && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
 && echo 'fn main() {}' > localapi/src/main.rs && touch localapi/src/lib.rs \
 && cargo build --release --locked --bin boxtable-operator \
 && rm -rf src localapi/src

# The operator itself. touch makes cargo rebuild the crate over the stub's newer artifacts.
# .git is not in the context: pass the revision for boxtable_build_info with
# --build-arg BOXTABLE_REVISION=$(git rev-parse --short=12 HEAD).
ARG BOXTABLE_REVISION=unknown
COPY . .
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked --bin boxtable-operator

# The root filesystem, assembled by the same script as scripts/image.sh's: the binary, glibc and
# libgcc_s from Debian's packages with their copyright files, /etc/passwd and /etc/group naming
# UID/GID 65532 nonroot. No shell, no package manager.
RUN apt-get update -qq \
 && scripts/image-rootfs.sh target/release/boxtable-operator /rootfs

FROM scratch
# Set by the release build (scripts/image.sh sets the same labels from Cargo.toml and git):
# --build-arg VERSION=0.1.0 --build-arg BOXTABLE_REVISION=$(git rev-parse HEAD)
# --build-arg CREATED=$(git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)
ARG VERSION=0.1.0
ARG BOXTABLE_REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.title="boxtable-operator" \
      org.opencontainers.image.description="Provisions Brighter outbox and inbox tables in PostgreSQL" \
      org.opencontainers.image.source="https://github.com/boxtable/boxtable-operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${BOXTABLE_REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --from=builder /rootfs /
USER 65532:65532
WORKDIR /
EXPOSE 8080/tcp
ENTRYPOINT ["/boxtable-operator"]
CMD ["run"]
