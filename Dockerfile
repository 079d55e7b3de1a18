# One image, the `census` binary; the subcommand selects the role:
#   census coordinator | census worker | census run | census status ...
# Build:  docker build -t census:latest .
#
# The base images are build arguments, so a machine that cannot pull them
# can name its own (same Debian release, same glibc): scripts/container-images
# makes them from Debian's packages and builds the `host-binary` target, which
# takes a `census` binary built on the host instead of compiling in the image:
#   docker build --target host-binary --build-arg RUNTIME_IMAGE=... -f Dockerfile DIR
# where DIR holds only that binary, named `census`.
ARG RUST_IMAGE=rust:1-slim-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p census \
 && cp target/release/census /usr/local/bin/census

FROM ${RUNTIME_IMAGE} AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/census --create-home census \
 && mkdir /secrets && chown census /secrets
USER census
WORKDIR /var/lib/census
EXPOSE 50051
CMD ["census", "--help"]

# The runtime with a binary built on the host (the build context is a
# directory holding only that binary).
FROM runtime AS host-binary
COPY census /usr/local/bin/census

# The default target: the runtime with the binary built above.
FROM runtime
COPY --from=build /usr/local/bin/census /usr/local/bin/census
