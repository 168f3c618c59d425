# eppkit — see README.md. Every target installs what it needs through the Go toolchain.
GO        ?= go
GINKGO    := $(GO) run github.com/onsi/ginkgo/v2/ginkgo
PKGS_UNIT := $(shell $(GO) list ./... | grep -v /suites/)
# suites/e2e needs a cluster: it runs in `make e2e`, not in `make suites`.
SUITES    := $(filter-out suites/e2e/,$(wildcard suites/*/))
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GINKGO_FLAGS ?=

.PHONY: all build test unit suites conformance conformance-upstream interop interop-tools $(INTEROP_RUNS) catalogue tools lint bench clean manifests image mutants flake-check e2e

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
# out/reports/published/ holds the same reports in GIE's publication layout
# (<GIE version>/epp/eppkit-reference-epp/, SPEC §8); reports/examples/reference/published/ is a copy.
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
		--publish-dir out/reports/published \
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

## interop: the suite against EPPs nobody here wrote (issue 9; reports/interop/README.md explains
# every failure). Each run starts the fleet, a local kube-apiserver + etcd holding the InferencePool
# (--endpoint-source apiserver: these EPPs discover only from Kubernetes) and the EPP, runs the
# selected profiles and writes its reports to $(INTEROP_OUT)/<run>/. Each run also passes
# --expect-failures reports/interop/expected-failures/<run>.txt, so the target exits 0 when every
# run failed exactly its explained tests, 1 when a result changed and 2 on a harness error.
# The upstream binaries are built once per machine (tools/gie-v1.5.0, tools/gie-v1.6.0; docs/tools.md).
# To add a run: a sub-target calling $(call interop_run,<run>,<command template>,<flags>), its
# expected-failures file, a README section, and its name in INTEROP_RUNS. Arguments containing
# commas go through variables (make splits $(call) arguments on commas).
INTEROP_OUT      ?= reports/interop
INTEROP_EXPECT   := reports/interop/expected-failures
INTEROP_FEATURES ?= OpenAIRequestParsing,PrefixCacheAffinity,QueueAwareness,KVCacheAwareness,LoRAAffinity
INTEROP_FLAGS    ?=
INTEROP_FLAGS_PREDICTOR ?=
INTEROP_RUNS     := interop-upstream-epp-v1.5.0 interop-upstream-epp-v1.5.0-tls interop-upstream-epp-v1.5.0-lora \
	interop-upstream-epp-v1.5.0-usage-crash interop-lwepp-v1.6.0 interop-predictor-parity interop-score-parity interop-sim
GIE_URL          := https://github.com/kubernetes-sigs/gateway-api-inference-extension
GIE_IMPL         := --organization kubernetes-sigs --url $(GIE_URL) --contact $(GIE_URL)/issues
# The upstream EPP v1.5.0 reads its kubeconfig from $$KUBECONFIG (controller-runtime's GetConfig;
# its pflag set has no --kubeconfig). Its flags: pkg/epp/server/options.go.
UPSTREAM_EPP     := KUBECONFIG={{.Kubeconfig}} exec $$(./bin/eppkit tools path gie epp) --pool-name {{.PoolName}} \
	--pool-namespace {{.PoolNamespace}} --metrics-endpoint-auth=false --tracing=false --grpc-port {{.GRPCPort}} \
	--grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}}
# lwepp v1.6.0's flags: pkg/lwepp/server/options.go (TLS on by default; no config, no body parsing).
LWEPP            := KUBECONFIG={{.Kubeconfig}} exec $$(./bin/eppkit tools path gie-v1.6.0 lwepp) --pool-name {{.PoolName}} \
	--pool-namespace {{.PoolNamespace}} --secure-serving=false --grpc-port {{.GRPCPort}} \
	--grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}}
UPSTREAM_SKIP    := OpenAIResponseUsageRobust

# interop_run: $(1) run name, $(2) command template, $(3) more eppkit conformance flags.
define interop_run
	./bin/eppkit conformance --target command --endpoint-source apiserver --command "$(2)" \
		--report-output $(INTEROP_OUT)/$(1) --log-dir out/interop/$(1) \
		--expect-failures $(INTEROP_EXPECT)/$(1).txt $(GIE_IMPL) $(3) $(INTEROP_FLAGS)
endef

interop: $(INTEROP_RUNS)
	@echo "interop: every run failed exactly its expected tests ($(INTEROP_EXPECT)/); reports in $(INTEROP_OUT)/"

interop-tools: build
	./bin/eppkit tools build k8s
	./bin/eppkit tools build gie
	./bin/eppkit tools build gie-v1.6.0

# (1) the upstream EPP v1.5.0 with its default config, plaintext. OpenAIResponseUsageRobust runs
# on its own (usage-crash): a malformed usage block crashes this EPP, which would fail every later test.
interop-upstream-epp-v1.5.0: interop-tools
	$(call interop_run,upstream-epp-v1.5.0,$(UPSTREAM_EPP) --secure-serving=false,--project gateway-api-inference-extension \
		--version v1.5.0 --profiles all --supported-features $(INTEROP_FEATURES) --skip-tests $(UPSTREAM_SKIP))

# (2) the same with TLS on: its default --secure-serving=true with a self-signed certificate
# (--target-tls insecure); its gRPC health port stays plaintext (cmd/epp/runner/runner.go).
interop-upstream-epp-v1.5.0-tls: interop-tools
	$(call interop_run,upstream-epp-v1.5.0-tls,$(UPSTREAM_EPP),--project gateway-api-inference-extension \
		--version v1.5.0 --profiles all --supported-features $(INTEROP_FEATURES) --skip-tests $(UPSTREAM_SKIP) \
		--target-tls insecure --target-health-tls plaintext)

# (1b) LoRAAffinity with the config that enables lora-affinity-scorer (the reference's
# manifests/epp-configs/lora-affinity.yaml, which v1.5.0 parses as is): the test passes.
interop-upstream-epp-v1.5.0-lora: interop-tools
	$(call interop_run,upstream-epp-v1.5.0-lora,$(UPSTREAM_EPP) --secure-serving=false --config-file {{.ConfigFile}},\
		--project gateway-api-inference-extension --version v1.5.0 --config-file manifests/epp-configs/lora-affinity.yaml \
		--profiles EPP-Routing --supported-features LoRAAffinity --run-test LoRAAffinity)

# (1c) OpenAIResponseUsageRobust alone: v1.5.0 panics on a JSON response whose usage is not an object.
interop-upstream-epp-v1.5.0-usage-crash: interop-tools
	$(call interop_run,upstream-epp-v1.5.0-usage-crash,$(UPSTREAM_EPP) --secure-serving=false,\
		--project gateway-api-inference-extension --version v1.5.0 --profiles EPP-Routing \
		--supported-features OpenAIRequestParsing --run-test OpenAIResponseUsageRobust)

# (3) GIE v1.6.0's lightweight EPP (round robin). Its body answers break FULL_DUPLEX_STREAMED, so
# the harness readies it with a headers-only pick and its tests fail one by one.
interop-lwepp-v1.6.0: interop-tools
	$(call interop_run,lwepp-v1.6.0,$(LWEPP),--project lwepp --version v1.6.0 --profiles all \
		--supported-features $(INTEROP_FEATURES) --readiness-probe headers-only)

# (4) predictor parity: the upstream EPP v1.5.0 with its predicted-latency plugins
# (manifests/epp-configs/upstream-v1.5.0-predicted-latency.yaml) and PREDICTION_SERVER_URL /
# TRAINING_SERVER_URL pointing at `eppkit predictor` gets predictions from the trained model.
interop-predictor-parity: interop-tools
	@mkdir -p $(INTEROP_OUT)/predictor-parity
	./bin/eppkit interop predictor-parity --report $(INTEROP_OUT)/predictor-parity/summary.md $(INTEROP_FLAGS_PREDICTOR)

## interop-sim: the EPP-Routing profile against the reference EPP (its conformance config, every
# feature it claims) with llm-d-inference-sim v0.10.2 as the model servers instead of the fakes
# (--fleet sim: one simulator per network namespace and veth pair, load pinned through each one's
# POST /admin/config fake-metrics; internal/simfleet). Needs root for `ip netns`: without it the
# run is skipped with a message (eppkit interop sim-preflight exits 4). The claimed features are the
# reference's, except DataParallelRanks, whose test starts a second pool of its own fakes.
# reports/interop/README.md compares the run with the same run on the fakes.
INTEROP_SIM_FEATURES ?= OpenAIRequestParsing,PrefixCacheAffinity,QueueAwareness,KVCacheAwareness,LoRAAffinity,PredictedLatency,RequestShedding,EndpointChurn
interop-sim: build
	./bin/eppkit tools build k8s
	./bin/eppkit tools build gie --only crds
	./bin/eppkit tools build sim
	@rc=0; ./bin/eppkit interop sim-preflight || rc=$$?; \
	if [ $$rc -eq 4 ]; then echo "interop-sim: SKIPPED: this machine cannot create network namespaces (needs root / CAP_NET_ADMIN and iproute2)"; exit 0; fi; \
	[ $$rc -eq 0 ] || exit $$rc; \
	./bin/eppkit conformance --target reference --endpoint-source apiserver --fleet sim --config-file $(CONFORMANCE_CONFIG) \
		--profiles EPP-Routing --supported-features $(INTEROP_SIM_FEATURES) \
		--report-output $(INTEROP_OUT)/sim-v0.10.2 --log-dir out/interop/sim-v0.10.2 \
		--expect-failures $(INTEROP_EXPECT)/sim-v0.10.2.txt --organization eppkit --project reference-epp \
		--url https://github.com/eppkit/eppkit --version $(VERSION) --contact https://github.com/eppkit/eppkit/issues $(INTEROP_FLAGS)

## interop-score-parity: upstream v1.5.0's approx-prefix-cache-producer + prefix-cache-scorer vs
# reference/plugins/prefix on seeded equivalence workloads (tools/gie-v1.5.0/score-parity, its
# own module); exits 1 on any mismatch not traced to D1/D2 of reports/interop/score-parity.md, and
# prints the benchfixture benchmark of both. A random seed each run (printed with a repro command;
# 0 unexplained over 40 random seeds before it was made random); SEED=n (or EPPKIT_SEED=n) fixes it.
.PHONY: interop-score-parity
interop-score-parity:
	cd tools/gie-v1.5.0/score-parity && go run . -seed=$(or $(SEED),$(EPPKIT_SEED),0)

## conformance-upstream: the upstream EPP v1.5.0 run of make interop alone (reports in
# reports/interop/upstream-epp-v1.5.0/); exits 0 when it fails exactly its explained tests.
conformance-upstream: interop-upstream-epp-v1.5.0

## e2e: the cluster end-to-end suite (suites/e2e) on PROVIDER (local by default: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler v1.37.2 from tools/ — built once, cached — and the process
# kubelet; docs/kubelet.md). The local cluster's pod CIDR 198.18.0.0/24 needs one local route
# (`ip route add local 198.18.0.0/24 dev lo`, added by the provider when it may). The cluster is
# destroyed after the run; EPPKIT_KEEP_CLUSTER=true keeps it (the next run then reuses it in ~1 s).
PROVIDER  ?= local
E2E_FLAGS ?=
e2e: build
	@if [ "$(PROVIDER)" = local ]; then \
		./bin/eppkit tools build k8s --all $(TOOLS_FLAGS) && ./bin/eppkit tools build gie --only crds || exit 2; \
	fi
	EPPKIT_PROVIDER=$(PROVIDER) EPPKIT_BIN=$(CURDIR)/bin/eppkit EPPKIT_E2E_OUT=$(CURDIR)/out/e2e \
		$(GINKGO) --label-filter=e2e --output-dir=out/e2e --junit-report=junit.xml $(E2E_FLAGS) ./suites/e2e

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
