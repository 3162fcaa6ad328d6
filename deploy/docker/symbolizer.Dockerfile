# profsym symbolizer: a static binary on a distroless, non-root base.
# Build from the repository root: docker build -f deploy/docker/symbolizer.Dockerfile -t ghcr.io/profsym/symbolizer:TAG .
# Both architectures at once (make images): docker buildx build --platform linux/amd64,linux/arm64 ...
# The build stage runs on the builder's own platform and cross-compiles for the target's: no
# emulation, and the same Go toolchain for every architecture.
FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm AS build
ARG TARGETOS TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO off: a static binary for the target architecture that runs on any node. The eBPF
# objects are generated and committed, so no clang is needed here.
RUN GOOS=$TARGETOS GOARCH=$TARGETARCH CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/symbolizer ./services/symbolizer

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/symbolizer /usr/local/bin/symbolizer
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/symbolizer"]
