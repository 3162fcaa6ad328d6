# profsym build, generation, lint, tests and benchmarks. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin
TOOLS ?= $(or $(PROFSYM_TOOLS),$(HOME)/.cache/profsym/bin)
GOLANGCI_LINT ?= $(TOOLS)/golangci-lint
# The gateway is a Go module of its own (an OpenTelemetry Collector distribution), built from its directory.
SERVICES := symbolizer collector
# Go modules of their own inside the repository: `go test ./...` from the root does not enter them.
MODULES := processor/symbolizeprocessor services/gateway
export PATH := $(TOOLS):$(PATH)

.PHONY: help build images generate generate-k8s check-generated lint deps test test-short test-arm64 test-arm64-emulated test-kernels test-kernel-debuginfo bench bench-report testdata fuzz fuzz-seeds demo cluster-up cluster-down clean

help: ## List the targets.
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

build: ## Build the three service binaries into bin/ (symbolizer, gateway, collector).
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./services/,$(SERVICES))
	cd services/gateway && $(GO) build -o $(CURDIR)/$(BIN)/gateway .

# `make images`: the three service images, each for every platform in PLATFORMS, built by docker
# buildx from deploy/docker (the build stage cross-compiles on the builder's own platform, no
# emulation). IMAGES_PUSH=1 pushes them to IMAGE_REGISTRY; otherwise buildx keeps the result in
# its build cache (a multi-platform image cannot be loaded into a local Docker image store).
DOCKER ?= docker
PLATFORMS ?= linux/amd64,linux/arm64
IMAGE_REGISTRY ?= ghcr.io/profsym
IMAGE_TAG ?= dev
IMAGE_SERVICES := symbolizer gateway collector
images: ## Build the service images for linux/amd64 and linux/arm64 with docker buildx (PLATFORMS, IMAGE_REGISTRY, IMAGE_TAG; IMAGES_PUSH=1 pushes).
	@command -v $(DOCKER) >/dev/null 2>&1 && $(DOCKER) buildx inspect >/dev/null 2>&1 || \
		{ echo "make images: no docker buildx builder here ('$(DOCKER) buildx inspect' fails): install Docker with buildx, or run 'docker buildx create --use'" >&2; exit 1; }
	@for s in $(IMAGE_SERVICES); do \
		echo "== $(IMAGE_REGISTRY)/$$s:$(IMAGE_TAG) ($(PLATFORMS))"; \
		$(DOCKER) buildx build --platform $(PLATFORMS) -f deploy/docker/$$s.Dockerfile \
			--build-arg VERSION=$(IMAGE_TAG) -t $(IMAGE_REGISTRY)/$$s:$(IMAGE_TAG) $(if $(IMAGES_PUSH),--push) . || exit 1; \
	done

# `make images-offline`: every image the cluster on this machine runs, built without Docker and
# without pulling (deploy/imagebuild reads the Dockerfiles; see deploy/docker/README.md), as OCI
# tarballs in IMAGES_OUT/linux-ARCH/ with IMAGES_OUT/images.txt and index.json listing them.
IMAGES_OUT ?= bin/images
IMAGES_ARCH ?= amd64
.PHONY: images-offline
images-offline: ## Build the images offline as OCI tarballs in bin/images (IMAGES_ARCH=amd64,arm64) for ctr images import.
	$(GO) run ./deploy/imagebuild -out $(IMAGES_OUT) -arch $(IMAGES_ARCH)

generate: generate-k8s ## Regenerate gen/ from proto/, the eBPF objects from bpf/ (needs clang for the latter) and deploy/k8s from the chart.
	$(GO) tool -modfile=tools/go.mod buf generate
	$(GO) generate ./services/collector/...

# The kustomize manifests (deploy/k8s/*/generated) are rendered from the Helm chart with each
# directory's values.yaml (deploy/k8s/README.md); needs helm (make deps).
generate-k8s: ## Render deploy/k8s (base and overlays) from the Helm chart deploy/helm/profsym.
	$(GO) run ./deploy/k8s/render

check-generated: generate ## Fail when committed generated code differs from a fresh generation.
	@if [ -n "$$(git status --porcelain -- gen services/collector deploy/k8s)" ]; then \
		echo "generated code is stale; run 'make generate' and commit:"; git status --porcelain -- gen services/collector deploy/k8s; exit 1; fi

lint: ## gofmt, go vet, golangci-lint and buf lint.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); \
		if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	@for m in $(MODULES); do echo "go vet ($$m)"; (cd $$m && $(GO) vet ./...) || exit 1; done
	$(GOLANGCI_LINT) run --allow-serial-runners ./...
	cd services/gateway && $(GOLANGCI_LINT) run --allow-serial-runners ./...
	cd deploy/imagebuild/otelcol-ebpf-profiler && $(GO) vet ./... && $(GOLANGCI_LINT) run --allow-serial-runners ./...
	$(GO) tool -modfile=tools/go.mod buf lint

# FUZZTIME is how long `make fuzz` runs each target. An input the fuzzer finds of interest is
# minimized first, for up to a minute by default, during which it runs no new input: 5s keeps
# the time for fuzzing.
FUZZTIME ?= 30s
fuzz: ## Run every fuzz target (go test -fuzz) for FUZZTIME each (default 30s); a failing input is kept under its package's testdata/fuzz.
	@for m in . $(MODULES); do (cd $$m && for pkg in $$($(GO) list ./...); do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "== $$pkg $$target"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg || exit 1; \
		done; done) || exit 1; done

fuzz-seeds: ## Regenerate the fuzz seeds of the index decoder (after an index format change) and of the CFI parser.
	./pkg/debuginfo/index/testdata/make-fuzz-seeds.sh
	./pkg/debuginfo/cfi/testdata/make-fuzz-seeds.sh

testdata: ## Build the engine's corpus of test binaries into testdata/build/.
	./testdata/build.sh

deps: ## Install what the tests need (.ci/install-deps: apt packages, MinIO, kube-apiserver...; idempotent, about a second when all is present). Needs root or sudo.
	@if [ "$$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then \
		echo "make: the tests need packages that only root can install: run 'su -c \"bash .ci/install-deps\"' (or make test as root), then make test again" >&2; exit 1; fi
	@bash .ci/install-deps

test: deps ## Install what the tests need (make deps), then run the whole test suite (real Redis, MinIO, debuginfod and eBPF; run as root), then each module's (the processor's builds a Collector with ocb).
	$(GO) test -count=1 -timeout 40m ./...
	@for m in $(MODULES); do echo "go test ($$m)"; (cd $$m && $(GO) test -count=1 -timeout 30m ./...) || exit 1; done
	@# `go test ./...` above ran the arm64 kernel test (e2e/arm64); the arm64 unit tests remain.
	$(MAKE) test-arm64-emulated

# The packages whose tests run for arm64 under user emulation (in -short mode: the corpus
# tests take tens of minutes emulated), and the tests skipped there: qemu-user passes no bpf(2)
# through, so what loads eBPF programs or creates maps runs on a real arm64 kernel in e2e/arm64
# instead; TestBuilderJITFrames reads the test process's own maps, which under qemu-user are
# the emulator's; TestMappedFileTruncated provokes a SIGBUS, which qemu-user delivers without its
# fault address, so Go reports it as a nil dereference rather than a fault. The test binary runs without GOARCH so that the programs tests build with the
# go command (the symbolizer a test starts, cgo programs) are the host's.
ARM64_EMULATED_PKGS ?= ./pkg/debuginfo/... ./services/collector/internal/debugupload ./services/collector/internal/exporter ./services/collector/internal/kallsyms ./services/collector/internal/nodescan ./services/collector/internal/procmaps ./services/collector/internal/profilebuilder ./services/collector/internal/unwind ./services/collector/internal/app
ARM64_EMULATED_SKIP ?= ^(TestManager.*|TestRunWritesOutputFile|TestBuilderJITFrames|TestMappedFileTruncated)$$

test-arm64: ## arm64: the collector on Debian's arm64 kernel under qemu-system-aarch64 (e2e/arm64), then the unit tests built for arm64 under user emulation.
	$(GO) test -count=1 -timeout 15m -run TestCollectorOnArm64Kernel -v ./e2e/arm64
	$(MAKE) test-arm64-emulated

test-kernels: ## The collector on Debian's 5.10, 6.1, 6.12 and 7.2 kernels (amd64 and arm64, under qemu) and on this machine's (e2e/kernels, also part of make test): the table of docs/kernels.md.
	$(GO) test -count=1 -timeout 20m -run TestKernelMatrix -v ./e2e/kernels

test-kernel-debuginfo: ## Kernel frames with file:line and inlined frames: Debian's 6.1 kernel under qemu, its -dbg package's vmlinux and brd.ko (860 MB, downloaded once) uploaded to a real symbolizer, the frames checked against llvm-symbolizer (e2e/kernels TestKernelDebuginfo).
	PROFSYM_KERNEL_DEBUGINFO=1 $(GO) test -count=1 -timeout 30m -run TestKernelDebuginfo -v ./e2e/kernels

test-arm64-emulated: ## The unit tests of the engine and the collector's eBPF-free packages built for arm64, run under qemu-aarch64-static.
	GOARCH=arm64 $(GO) test -short -count=1 -timeout 30m -exec 'env -u GOARCH qemu-aarch64-static' -skip '$(ARM64_EMULATED_SKIP)' $(ARM64_EMULATED_PKGS)

test-short: ## Unit tests only: no servers, no eBPF, no corpus, no Collector build.
	$(GO) test -short -count=1 ./...
	@for m in $(MODULES); do (cd $$m && $(GO) test -short -count=1 ./...) || exit 1; done

bench: ## Go benchmarks of the hot paths, then the comparison scripts under bench/ (bench/soak/run.sh, 30 minutes, on its own).
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...
	@for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchmem ./...) || exit 1; done
	@# The soak (bench/soak, 30 minutes), the demangler differential (bench/demangle, downloads about 550 MB of Debian packages) and the biggest debuginfo (bench/bigdwarf, builds a 1 GB DWARF file) are run on their own; bench/report runs the others again for the page (make bench-report).
	@for s in bench/*/run.sh; do case $$s in bench/soak/run.sh|bench/report/run.sh|bench/demangle/run.sh|bench/bigdwarf/run.sh) continue;; esac; echo "== $$s"; bash $$s; done

bench-report: ## Run the bench/ scripts in one run (10 to 15 minutes on 2 cores; as root, after .ci/install-deps) and regenerate docs/benchmarks.md and its plots (bench/report/run.sh).
	@# sudo resets PATH to a list without the Go toolchain: fall back to its usual place.
	@PATH="$$PATH:$$(dirname $$(command -v $(GO) || echo /usr/local/go/bin/go))" bash bench/report/run.sh

demo: ## The whole pipeline on this machine for a short while, then a symbolized profile (run as root; DEMO_FLAGS="--duration 30s").
	@# sudo resets PATH to a list without the Go toolchain: fall back to its usual place.
	@gotool=$$(command -v $(GO) || echo /usr/local/go/bin/go); $$gotool run ./demo $(DEMO_FLAGS)

# `make cluster-up`: the single-node cluster of e2e/cluster (etcd, the control plane, containerd,
# the kubelet, kube-proxy, CoreDNS) in a network namespace of its own, CLUSTER_NAME, with its
# files in CLUSTER_DIR; its daemons run on after make returns, until `make cluster-down`. kubectl
# runs inside the namespace: `ip netns exec $(CLUSTER_NAME) kubectl --kubeconfig $(CLUSTER_DIR)/kubeconfig ...`.
CLUSTER_DIR ?= $(or $(TMPDIR),/tmp)/profsym-cluster
CLUSTER_NAME ?= profsym-cluster
cluster-up: ## Bring the single-node test cluster up in network namespace CLUSTER_NAME (run as root, after make deps); prints the kubeconfig and the containerd socket.
	@gotool=$$(command -v $(GO) || echo /usr/local/go/bin/go); $$gotool run ./e2e/cluster/cmd/cluster up -dir $(CLUSTER_DIR) -name $(CLUSTER_NAME)

cluster-down: ## Take the cluster of make cluster-up down completely (processes, containers, mounts, network namespace, cgroups, files).
	@gotool=$$(command -v $(GO) || echo /usr/local/go/bin/go); $$gotool run ./e2e/cluster/cmd/cluster down -dir $(CLUSTER_DIR)

clean: ## Remove build outputs.
	rm -rf $(BIN) testdata/build
