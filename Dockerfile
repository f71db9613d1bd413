# syntax=docker/dockerfile:1
# Builds the boxtable-operator image: docker build -t boxtable-operator .

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
 && cargo build --release --locked --bin boxtable-operator \
 && cp target/release/boxtable-operator /boxtable-operator

# Runtime: glibc and libgcc only, no shell, no package manager, non-root.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="boxtable-operator" \
      org.opencontainers.image.description="Provisions Brighter outbox and inbox tables in PostgreSQL" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /boxtable-operator /boxtable-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/boxtable-operator"]
CMD ["run"]
