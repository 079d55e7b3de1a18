# One image, the `census` binary; the subcommand selects the role:
#   census coordinator | census worker | census run | census status ...
# Build:  docker build -t census:latest .

FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p census \
 && cp target/release/census /usr/local/bin/census

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/census --create-home census \
 && mkdir /secrets && chown census /secrets
COPY --from=build /usr/local/bin/census /usr/local/bin/census
USER census
WORKDIR /var/lib/census
EXPOSE 50051
CMD ["census", "--help"]
