# profsym gateway, the OpenTelemetry Collector distribution: a static binary on a distroless,
# non-root base. It runs the configuration named by --config (the Kubernetes manifests mount it
# from a ConfigMap); without one, its built-in loopback configuration.
# Build from the repository root: docker build -f deploy/docker/gateway.Dockerfile -t ghcr.io/profsym/gateway:TAG .
# Both architectures at once (make images): docker buildx build --platform linux/amd64,linux/arm64 ...
# The build stage runs on the builder's own platform and cross-compiles for the target's: no
# emulation, and the same Go toolchain for every architecture.
FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm AS build
ARG TARGETOS TARGETARCH
WORKDIR /src
# The distribution is a Go module of its own (services/gateway) that replaces the root module
# and processor/symbolizeprocessor by path: their go.mod files come first so the module
# download is cached apart from the sources.
COPY go.mod go.sum ./
COPY processor/symbolizeprocessor/go.mod processor/symbolizeprocessor/go.sum ./processor/symbolizeprocessor/
COPY services/gateway/go.mod services/gateway/go.sum ./services/gateway/
RUN cd services/gateway && go mod download
COPY . .
# CGO off: a static binary for the target architecture that runs on any node.
ARG VERSION=dev
RUN cd services/gateway && GOOS=$TARGETOS GOARCH=$TARGETARCH CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/gateway .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /usr/local/bin/gateway
USER 65532:65532
# OTLP gRPC and HTTP, the Collector's /metrics, the health_check extension.
EXPOSE 4317 4318 8888 13133
ENTRYPOINT ["/usr/local/bin/gateway"]
