# eppkit — see README.md. Every target installs what it needs through the Go toolchain.
GO        ?= go
GINKGO    := $(GO) run github.com/onsi/ginkgo/v2/ginkgo
PKGS_UNIT := $(shell $(GO) list ./... | grep -v /suites/)
SUITES    := $(wildcard suites/*/)
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GINKGO_FLAGS ?=

.PHONY: all build test unit suites conformance conformance-upstream catalogue tools lint bench clean manifests image mutants flake-check

all: build

## build: compile the eppkit CLI to bin/eppkit
build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/eppkit ./cmd/eppkit

## test: unit tests with the race detector, then every Ginkgo suite with --race
test: unit suites

unit:
	$(GO) test -race -count=1 $(PKGS_UNIT)

suites:
	@if [ -n "$(SUITES)" ]; then \
		$(GINKGO) --race --randomize-all --timeout=30m --output-dir=out/suites --junit-report=junit.xml $(GINKGO_FLAGS) $(SUITES); \
	else echo "no suites yet"; fi

## conformance: the main job (fleet + gateway + EPP + conformance tests + reports)
# Runs every profile against the reference EPP (bin/eppkit reference-epp) with every tested feature
# claimed; reports go to out/reports/. The default endpoint source, apiserver, writes the
# InferencePool and Ready Pods to a local kube-apiserver + etcd, so the reference discovers the
# fleet through Kubernetes; their pinned binaries are built once (about 10 minutes on an idle
# 2-core machine) and cached under ~/.cache/eppkit (docs/tools.md). CONFORMANCE_SOURCE=static
# skips the control plane. The reference's config, manifests/epp-configs/conformance.yaml, holds
# every feature it claims: its defaults plus lora-affinity-scorer for requests without SLO
# headers, predicted-latency routing for requests with them, and latency-slo-admitter.
CONFORMANCE_SOURCE ?= apiserver
CONFORMANCE_CONFIG ?= manifests/epp-configs/conformance.yaml
CONFORMANCE_FLAGS  ?=
conformance: build
	@if [ "$(CONFORMANCE_SOURCE)" = apiserver ]; then \
		./bin/eppkit tools build k8s && ./bin/eppkit tools build gie --only crds || exit 2; \
	fi
	./bin/eppkit conformance --target reference --endpoint-source $(CONFORMANCE_SOURCE) \
		--config-file $(CONFORMANCE_CONFIG) \
		--profiles all --all-features --report-output out/reports --log-dir out/conformance \
		--organization eppkit --project reference-epp --url https://github.com/eppkit/eppkit \
		--version $(VERSION) --contact https://github.com/eppkit/eppkit/issues $(CONFORMANCE_FLAGS)

## tools: build the pinned upstream binaries of tools/ into ${XDG_CACHE_HOME:-~/.cache}/eppkit/ (see docs/tools.md):
# kube-apiserver v1.37.2 + etcd v3.6.11 (the apiserver endpoint source), the GIE v1.5.0 CRDs and the
# upstream EPP. Cached by version: a second run only prints the paths. TOOLS_FLAGS=--all adds
# kube-controller-manager and kube-scheduler; TOOLS_FLAGS=-p=1 lowers peak memory.
TOOLS_FLAGS ?=
tools: build
	./bin/eppkit tools build k8s $(TOOLS_FLAGS)
	./bin/eppkit tools build gie $(TOOLS_FLAGS)

## conformance-upstream: the registry against the upstream EPP v1.5.0 (tools/gie-v1.5.0), which
# only discovers endpoints from an InferencePool, so the pool lives on a local kube-apiserver
# (--endpoint-source apiserver). Informational: tests that fail (exit 1) still exit 0 here; a harness
# or flag error (exit 2 or 3) fails the target. The upstream EPP reads its kubeconfig from
# $$KUBECONFIG (controller-runtime's GetConfig; v1.5.0's pflag set has no --kubeconfig flag).
UPSTREAM_FEATURES ?= OpenAIRequestParsing,PrefixCacheAffinity,QueueAwareness,KVCacheAwareness,LoRAAffinity,EndpointChurn
UPSTREAM_FLAGS    ?=
conformance-upstream: build
	./bin/eppkit tools build k8s
	./bin/eppkit tools build gie
	@epp=$$(./bin/eppkit tools path gie epp) || exit 2; \
	./bin/eppkit conformance --target command --endpoint-source apiserver \
		--command "KUBECONFIG={{.Kubeconfig}} exec $$epp --pool-name {{.PoolName}} --pool-namespace {{.PoolNamespace}} --secure-serving=false --metrics-endpoint-auth=false --tracing=false --grpc-port {{.GRPCPort}} --grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}}" \
		--profiles EPP,EPP-Routing --supported-features $(UPSTREAM_FEATURES) \
		--report-output out/reports/upstream-v1.5.0 --log-dir out/conformance-upstream \
		--organization kubernetes-sigs --project gateway-api-inference-extension \
		--url https://github.com/kubernetes-sigs/gateway-api-inference-extension --version v1.5.0 \
		--contact https://github.com/kubernetes-sigs/gateway-api-inference-extension/issues $(UPSTREAM_FLAGS); \
	rc=$$?; echo "conformance-upstream: eppkit conformance exited $$rc (0 all passed, 1 some tests failed: informational)"; \
	if [ $$rc -ge 2 ]; then exit $$rc; fi

## catalogue: regenerate reports/CATALOGUE.md from the conformance test registry
catalogue:
	$(GO) run ./cmd/eppkit conformance catalogue -o reports/CATALOGUE.md

## mutants: the mutant matrix (reports/mutants.md). bin/eppkit-mutants is built with the tag
# eppkit_mutants (internal/mutant; the normal build cannot select a mutant); every black-box mutant
# runs the whole registry against the reference with EPPKIT_MUTANT set, every white-box mutant its
# suite, after a baseline with no mutant; exit 1 when a mutant escapes the test that targets it.
# MUTANTS_FLAGS="--only kv-ignored" runs one. Takes ~15 minutes on a loaded 2-core machine.
MUTANTS_FLAGS ?=
mutants:
	$(GO) build -tags eppkit_mutants -ldflags "-X main.version=$(VERSION)" -o bin/eppkit-mutants ./cmd/eppkit
	./bin/eppkit-mutants tools build k8s && ./bin/eppkit-mutants tools build gie --only crds || exit 2
	./bin/eppkit-mutants mutants --output reports/mutants.md --log-dir out/mutants $(MUTANTS_FLAGS)

## flake-check: the whole conformance run FLAKE_RUNS (20) times against the reference, seed i per
# run, over FLAKE_SOURCE (apiserver, as make conformance); zero failures allowed; per-test wall
# time in reports/flake-check.md.
FLAKE_RUNS   ?= 20
FLAKE_SOURCE ?= apiserver
FLAKE_FLAGS  ?=
flake-check: build
	@if [ "$(FLAKE_SOURCE)" = apiserver ]; then \
		./bin/eppkit tools build k8s && ./bin/eppkit tools build gie --only crds || exit 2; \
	fi
	./bin/eppkit flake-check --runs $(FLAKE_RUNS) --output reports/flake-check.md --log-dir out/flake-check $(FLAKE_FLAGS) -- \
		--target reference --endpoint-source $(FLAKE_SOURCE) --config-file $(CONFORMANCE_CONFIG) --profiles all --all-features

## lint: go vet (also of the eppkit_mutants build) and a gofmt check
lint:
	$(GO) vet ./...
	$(GO) vet -tags eppkit_mutants ./internal/mutant ./cmd/eppkit ./reference/...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## bench: Go benchmarks of the hot paths
bench:
	$(GO) test -run='^$$' -bench=. -benchmem $(PKGS_UNIT)

## manifests: regenerate the generated copies in manifests/k8s (the GIE CRDs from the pinned module,
# the Envoy ConfigMap from manifests/envoy/envoy.yaml); `go test ./manifests` checks them
manifests:
	EPPKIT_UPDATE_MANIFESTS=1 $(GO) test -count=1 -run 'TestCRDsEqualPinnedModule|TestEnvoyConfigMapIsBootstrap' ./manifests

## image: build the single eppkit image (Dockerfile) as $(IMAGE) with the container engine $(ENGINE)
IMAGE  ?= eppkit:dev
ENGINE ?= docker
image:
	$(ENGINE) build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

clean:
	rm -rf bin out
