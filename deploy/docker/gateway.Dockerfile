# profsym gateway: a static binary on a distroless, non-root base.
# Build from the repository root: docker build -f deploy/docker/gateway.Dockerfile -t ghcr.io/profsym/gateway:TAG .
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO off: a static binary that runs on any node. The eBPF objects are generated and committed,
# so no clang is needed here.
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/gateway ./services/gateway

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /usr/local/bin/gateway
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gateway"]
