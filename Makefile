# eppkit — see README.md. Every target installs what it needs through the Go toolchain.
GO        ?= go
GINKGO    := $(GO) run github.com/onsi/ginkgo/v2/ginkgo
PKGS_UNIT := $(shell $(GO) list ./... | grep -v /suites/)
# suites/e2e needs a cluster: it runs in `make e2e`, not in `make suites`.
SUITES    := $(filter-out suites/e2e/,$(wildcard suites/*/))
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GINKGO_FLAGS ?=

.PHONY: e2e-framework conformance-cluster
.PHONY: all build test unit suites example conformance conformance-upstream interop interop-tools $(INTEROP_RUNS) catalogue tools lint bench clean manifests image mutants flake-check e2e

all: build

## build: compile the eppkit CLI to bin/eppkit
build:
	$(GO) build -ldflags "-X github.com/eppkit/eppkit/internal/version.version=$(VERSION)" -o bin/eppkit ./cmd/eppkit

## test: unit tests with the race detector, then every Ginkgo suite with --race
test: unit suites

unit:
	$(GO) test -race -count=1 $(PKGS_UNIT)

suites:
	@if [ -n "$(SUITES)" ]; then \
		$(GINKGO) --race --randomize-all --timeout=30m --output-dir=out/suites --junit-report=junit.xml $(GINKGO_FLAGS) $(SUITES); \
	else echo "no suites yet"; fi

## example: examples/gotest, a module of its own whose go test runs the suite against the
# reference EPP through conformance.RunTest, as an implementer's go test would (static source;
# reports in examples/gotest/out/)
example:
	cd examples/gotest && $(GO) test -count=1 ./...

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

## tools: build every pinned upstream binary of tools/ that the tests and .ci/run use into
# ${XDG_CACHE_HOME:-~/.cache}/eppkit/ (see docs/tools.md): kube-apiserver and etcd v1.37.2 (with
# --all also the kind node image's control-plane and node binaries), the GIE v1.5.0 CRDs and
# upstream EPP, GIE v1.6.0's lwepp, llm-d-inference-sim v0.10.2 and llm-d-inference-scheduler
# v0.7.1. Cached by version: a second run only prints the paths. A cold build takes about an hour
# on an idle 2-core machine (the simulator about 40 minutes of it); TOOLS_FLAGS=--p=1 lowers peak
# memory. The kind node image itself is built apart (`eppkit tools build kind-node`: it needs a
# container engine and Debian's debootstrap).
TOOLS_FLAGS ?=
tools: build
	./bin/eppkit tools build k8s --all $(TOOLS_FLAGS)
	./bin/eppkit tools build gie $(TOOLS_FLAGS)
	./bin/eppkit tools build gie-v1.6.0 $(TOOLS_FLAGS)
	./bin/eppkit tools build sim $(TOOLS_FLAGS)
	./bin/eppkit tools build llmd $(TOOLS_FLAGS)

## interop: the suite against EPPs nobody here wrote (issue 9; reports/interop/README.md explains
# every failure). Each run starts the fleet, a local kube-apiserver + etcd holding the InferencePool
# (--endpoint-source apiserver: these EPPs discover only from Kubernetes) and the EPP, runs the
# selected profiles and writes its reports to $(INTEROP_OUT)/<run>/. Each run also passes
# --expect-failures reports/interop/expected-failures/<run>.txt, so the target exits 0 when every
# run failed exactly its explained tests, 1 when a result changed and 2 on a harness error.
# The upstream binaries are built once per machine (tools/gie-v1.5.0, tools/gie-v1.6.0, tools/llmd-v0.7.1; docs/tools.md).
# To add a run: a sub-target calling $(call interop_run,<run>,<command template>,<flags>), its
# expected-failures file, a README section, and its name in INTEROP_RUNS. Arguments containing
# commas go through variables (make splits $(call) arguments on commas).
INTEROP_OUT      ?= reports/interop
INTEROP_EXPECT   := reports/interop/expected-failures
INTEROP_FEATURES ?= OpenAIRequestParsing,PrefixCacheAffinity,QueueAwareness,KVCacheAwareness,LoRAAffinity,SubsetHintIPMatching
INTEROP_FLAGS    ?=
INTEROP_FLAGS_PREDICTOR ?=
INTEROP_RUNS     := interop-upstream-epp-v1.5.0 interop-upstream-epp-v1.5.0-tls interop-upstream-epp-v1.5.0-lora \
	interop-upstream-epp-v1.5.0-usage-crash interop-lwepp-v1.6.0 interop-predictor-parity interop-score-parity interop-sim \
	interop-llmd-scheduler-v0.7.1 interop-llmd-scheduler-v0.7.1-usage-crash interop-llmd-scheduler-v0.7.1-lora \
	interop-llmd-scheduler-v0.7.1-sample-config interop-llmd-prefix-scores
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
# OpenAIResponseUsageRobust runs apart (it crashes v1.5.0 and llm-d's EPP: the -usage-crash runs).
# DuplicateRequestIDIsolated (formerly ReferenceDuplicateRequestIDIsolated) needs the EPP-Production
# feature RequestIDIsolation, which these runs do not claim: both key plugin state by x-request-id
# (GIE #1489), which the test caught in 1 of 3 runs against v1.5.0 and 0 of 2 against llm-d
# (reports/interop/README.md).
UPSTREAM_SKIP    := OpenAIResponseUsageRobust
# llm-d's EPP (llm-d-inference-scheduler v0.7.1: GIE v1.4.0's runner, so v1.5.0's flags and
# $$KUBECONFIG). It always creates an OTLP trace exporter to localhost:4317 and samples 10% of
# requests (pkg/telemetry/tracing.go, InitTracing); OTEL_TRACES_SAMPLER_ARG=0 samples none, so it
# sends nothing to whatever another process serves on that port.
LLMD_EPP         := KUBECONFIG={{.Kubeconfig}} OTEL_TRACES_SAMPLER_ARG=0 exec $$(./bin/eppkit tools path llmd epp) \
	--pool-name {{.PoolName}} --pool-namespace {{.PoolNamespace}} --secure-serving=false --metrics-endpoint-auth=false \
	--tracing=false --grpc-port {{.GRPCPort}} --grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}}
LLMD_URL         := https://github.com/llm-d/llm-d-inference-scheduler
LLMD_IMPL        := --organization llm-d --url $(LLMD_URL) --contact $(LLMD_URL)/issues
LLMD_VERSION     := --project llm-d-inference-scheduler --version v0.7.1
# llm-d's sample config (deploy/config/epp-config.yaml: decode-filter, prefix-cache-scorer,
# max-score-picker) scores prefix only, so only the features it scores are claimed.
LLMD_SAMPLE_FEATURES := OpenAIRequestParsing,PrefixCacheAffinity

# interop_run: $(1) run name, $(2) command template, $(3) more eppkit conformance flags, $(4) the
# implementation's --organization/--url/--contact (default: GIE's).
define interop_run
	./bin/eppkit conformance --target command --endpoint-source apiserver --command "$(2)" \
		--report-output $(INTEROP_OUT)/$(1) --log-dir out/interop/$(1) \
		--expect-failures $(INTEROP_EXPECT)/$(1).txt $(or $(4),$(GIE_IMPL)) $(3) $(INTEROP_FLAGS)
endef

interop: $(INTEROP_RUNS)
	@echo "interop: every run failed exactly its expected tests ($(INTEROP_EXPECT)/); reports in $(INTEROP_OUT)/"

interop-tools: build
	./bin/eppkit tools build k8s
	./bin/eppkit tools build gie
	./bin/eppkit tools build gie-v1.6.0
	./bin/eppkit tools build llmd

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

# (5) llm-d's EPP (llm-d-inference-scheduler v0.7.1, tools/llmd-v0.7.1) with its default config
# (GIE v1.4.0's: queue, kv-cache-utilization and prefix scorers). Like v1.5.0 it panics on a
# malformed usage block, so OpenAIResponseUsageRobust runs on its own (5b).
interop-llmd-scheduler-v0.7.1: interop-tools
	$(call interop_run,llmd-scheduler-v0.7.1,$(LLMD_EPP),$(LLMD_VERSION) --profiles all \
		--supported-features $(INTEROP_FEATURES) --skip-tests $(UPSTREAM_SKIP),$(LLMD_IMPL))

# (5b) OpenAIResponseUsageRobust alone against llm-d's EPP.
interop-llmd-scheduler-v0.7.1-usage-crash: interop-tools
	$(call interop_run,llmd-scheduler-v0.7.1-usage-crash,$(LLMD_EPP),$(LLMD_VERSION) --profiles EPP-Routing \
		--supported-features OpenAIRequestParsing --run-test OpenAIResponseUsageRobust,$(LLMD_IMPL))

# (5c) LoRAAffinity with lora-affinity-scorer enabled (manifests/epp-configs/lora-affinity.yaml).
interop-llmd-scheduler-v0.7.1-lora: interop-tools
	$(call interop_run,llmd-scheduler-v0.7.1-lora,$(LLMD_EPP) --config-file {{.ConfigFile}},$(LLMD_VERSION) \
		--config-file manifests/epp-configs/lora-affinity.yaml --profiles EPP-Routing --supported-features LoRAAffinity \
		--run-test LoRAAffinity,$(LLMD_IMPL))

# (5d) llm-d's own sample config, read from the module zip (`eppkit tools build llmd` extracts
# deploy/config/epp-config.yaml into the tools cache), claiming only what it scores.
interop-llmd-scheduler-v0.7.1-sample-config: interop-tools
	$(call interop_run,llmd-scheduler-v0.7.1-sample-config,$(LLMD_EPP) --config-file {{.ConfigFile}},$(LLMD_VERSION) \
		--config-file $$(./bin/eppkit tools path llmd configs)/epp-config.yaml --profiles all \
		--supported-features $(LLMD_SAMPLE_FEATURES) --skip-tests $(UPSTREAM_SKIP),$(LLMD_IMPL))

# (4) predictor parity: the upstream EPP v1.5.0 with its predicted-latency plugins
# (manifests/epp-configs/upstream-v1.5.0-predicted-latency.yaml) and PREDICTION_SERVER_URL /
# TRAINING_SERVER_URL pointing at `eppkit predictor` gets predictions from the trained model.
interop-predictor-parity: interop-tools
	@mkdir -p $(INTEROP_OUT)/predictor-parity
	./bin/eppkit interop predictor-parity --report $(INTEROP_OUT)/predictor-parity/summary.md $(INTEROP_FLAGS_PREDICTOR)

## interop-sim: the EPP-Routing profile against the reference EPP (its conformance config, every
# feature it claims) with llm-d-inference-sim v0.10.2 as the model servers instead of the fakes
# (--fleet sim: one simulator per network namespace and veth pair, load pinned through each one's
# POST /admin/config fake-metrics; conformance/simfleet). Needs root for `ip netns`: without it the
# run is skipped with a message (eppkit interop sim-preflight exits 4). The claimed features are the
# reference's, except DataParallelRanks, whose test starts a second pool of its own fakes.
# reports/interop/README.md compares the run with the same run on the fakes.
INTEROP_SIM_FEATURES ?= OpenAIRequestParsing,PrefixCacheAffinity,QueueAwareness,KVCacheAwareness,LoRAAffinity,PredictedLatency,RequestShedding,EndpointChurn,SubsetHintIPMatching
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

## interop-llmd-prefix-scores: llm-d's prefix plugin (GIE v1.4.0's prefix-cache-scorer, what
# llm-d-inference-scheduler v0.7.1 runs) against upstream v1.5.0's producer + scorer, score by score:
# tools/gie-v1.5.0/score-parity records a seeded equivalence workload with v1.5.0's results
# (-record, one per shape: 0 = the default parameters, 2 = a configured lruCapacityPerServer of 20),
# tools/llmd-v0.7.1/prefix-replay replays it on v1.4.0 (reports/interop/README.md). Exits 1 on a
# difference other than D1 (v1.4.0 honours lruCapacityPerServer; v1.5.0 ignores it). A random seed
# each run (printed); SEED=n (or EPPKIT_SEED=n) fixes it. Built without cgo like the llm-d EPP, so
# the replay reuses its compiled packages.
LLMD_PREFIX_SHAPES ?= 0 2
.PHONY: interop-llmd-prefix-scores
interop-llmd-prefix-scores:
	@mkdir -p out/interop/llmd-prefix-scores
	@seed=$(or $(SEED),$(EPPKIT_SEED),$$(date +%s%N)); echo "interop-llmd-prefix-scores: seed=$$seed (repro: make interop-llmd-prefix-scores SEED=$$seed)"; \
	for sh in $(LLMD_PREFIX_SHAPES); do \
		trace=$(CURDIR)/out/interop/llmd-prefix-scores/shape$$sh.jsonl; \
		(cd tools/gie-v1.5.0/score-parity && GOWORK=off go run . -seed=$$seed -runs=1 -bench=false -record $$trace -record-shape $$sh) || exit $$?; \
		(cd tools/llmd-v0.7.1 && GOWORK=off CGO_ENABLED=0 go run -trimpath ./prefix-replay -trace $$trace) || exit $$?; \
	done

## interop-llmd-router-probe: llm-d's EPP moved to github.com/llm-d/llm-d-router (GIE v1.6.0 points
# there); the module proxy refused every tag of that module path when the llm-d runs were added
# (issue 21), so it cannot be built from a fresh clone. This asks the proxy for each known tag
# (git tags of llm-d/llm-d-router whose go.mod names that path) and prints whether it is served now;
# once one is, it can become a tools module and interop runs like tools/llmd-v0.7.1. Always exits 0.
LLMD_ROUTER_MODULE := github.com/llm-d/llm-d-router
LLMD_ROUTER_TAGS   ?= v0.9.0-rc.1 v0.9.0-rc.2 v0.9.0 v0.10.0-rc.1 v0.10.0
.PHONY: interop-llmd-router-probe
interop-llmd-router-probe:
	@tmp=$$(mktemp -d -t eppkit-llmd-router-probe.XXXXXX); served=""; \
	for v in $(LLMD_ROUTER_TAGS); do \
		if out=$$(cd $$tmp && GOWORK=off GOFLAGS= go mod download -json $(LLMD_ROUTER_MODULE)@$$v 2>&1); then \
			echo "$(LLMD_ROUTER_MODULE)@$$v: SERVED by $$(go env GOPROXY)"; served="$$served $$v"; \
		else \
			echo "$(LLMD_ROUTER_MODULE)@$$v: refused: $$(printf '%s' "$$out" | sed -n 's/.*"Error": "\(.*\)".*/\1/p' | sed -e 's/^.*\.info: //' -e 's/\\n\\t/ /g' | head -1)"; \
		fi; \
	done; rmdir $$tmp; \
	if [ -n "$$served" ]; then echo "interop-llmd-router-probe: served now:$$served — llm-d-router can get a tools module and interop runs (see tools/llmd-v0.7.1)"; \
	else echo "interop-llmd-router-probe: no tag of $(LLMD_ROUTER_MODULE) is served yet"; fi

## conformance-upstream: the upstream EPP v1.5.0 run of make interop alone (reports in
# reports/interop/upstream-epp-v1.5.0/); exits 0 when it fails exactly its explained tests.
conformance-upstream: interop-upstream-epp-v1.5.0

## e2e: the cluster end-to-end suite (suites/e2e) on PROVIDER (default kind). kind checks the
# engine (hack/container-engine.sh --check: exit 2 with its message when there is none), builds
# eppkit:dev (make image) and runs every spec on a kind cluster (EPPKIT_CLUSTER_NAME, default
# eppkit-e2e; node image: the pinned kindest/node when it can be had, else the offline one of
# `eppkit tools build kind-node`; docs/kubernetes.md). PROVIDER=existing runs it on the current
# kubeconfig's cluster (EPPKIT_CONTEXT), which must be able to pull eppkit:dev (EPPKIT_E2E_IMAGE
# names another). The kind cluster is destroyed after the run; EPPKIT_KEEP_CLUSTER=true keeps it
# (the next run then reuses it in about a second).
PROVIDER  ?= kind
E2E_FLAGS ?=
e2e: build
	@if [ "$(PROVIDER)" = kind ]; then \
		hack/container-engine.sh --check >/dev/null || exit 2; \
		$(MAKE) --no-print-directory image || exit 2; \
	fi
	EPPKIT_PROVIDER=$(PROVIDER) EPPKIT_E2E_OUT=$(CURDIR)/out/e2e \
		$(GINKGO) --label-filter=e2e --output-dir=out/e2e --junit-report=junit.xml $(E2E_FLAGS) ./suites/e2e

## e2e-framework: the sigs.k8s.io/e2e-framework example (conformance/cluster/e2eframework) on kind:
# creates kind cluster eppkit-kind-e2ef, loads eppkit:dev, deploys fleet, pool and the reference
# EPP, runs the EPP-Routing profile against it (docs/kubernetes.md). Needs what make e2e
# needs.
e2e-framework: build
	hack/container-engine.sh --check >/dev/null || exit 2
	$(MAKE) --no-print-directory image
	EPPKIT_E2E_FRAMEWORK=1 $(GO) test -count=1 -timeout=40m -v -run TestKindExample ./conformance/cluster/e2eframework/

## conformance-cluster: the conformance suite against the reference EPP deployed in a kind cluster
# (--target cluster --provider kind: fleet pods, InferencePool and EPP in the cluster, reached
# through port-forwards). CLUSTER_FEATURES are the features claimed; DataParallelRanks and
# PredictedLatency need processes on this host the EPP cannot reach, and StaleEndpointFiltered (its
# feature StaleEndpointFiltering is not claimed here) stops a fake's metrics endpoint in process
# (docs/kubernetes.md).
CLUSTER_FEATURES ?= OpenAIRequestParsing,PrefixCacheAffinity,QueueAwareness,KVCacheAwareness,LoRAAffinity,EndpointChurn,RequestShedding
conformance-cluster: build
	hack/container-engine.sh --check >/dev/null || exit 2
	$(MAKE) --no-print-directory image
	./bin/eppkit conformance --target cluster --endpoint-source cluster --provider kind --profiles all \
		--supported-features $(CLUSTER_FEATURES) --config-file $(CONFORMANCE_CONFIG) \
		--log-dir out/conformance-cluster $(CONFORMANCE_FLAGS)

## catalogue: regenerate reports/CATALOGUE.md from the conformance test registry
catalogue:
	$(GO) run ./cmd/eppkit conformance catalogue -o reports/CATALOGUE.md

## mutants: the mutant matrix (reports/mutants.md; selfcheck/mutant/matrix). bin/eppkit-mutants is built
# with the tag eppkit_mutants (the normal build cannot select a mutant). After a baseline per lane,
# every protocol mutant runs the whole registry behind the mutant interceptor (selfcheck/mutant/interceptor) in
# front of the reference AND of the upstream EPP v1.5.0 (judged on the tests it passes on its own
# baseline, with the interop run's features and RequestShedding, which v1.5.0 passes); every other black-box mutant runs it against the
# reference with EPPKIT_MUTANT set (wrapper plugins, decorated sources, the hooks left in
# reference/); every white-box mutant its suite. Exit 1 when a mutant escapes the test that targets
# it. MUTANTS_FLAGS="--only kv-ignored" runs one; MUTANTS_UPSTREAM= leaves the upstream lane out (and
# builds only GIE's CRDs, not its EPP).
# Takes ~30 minutes on a loaded 2-core machine (the upstream lane about 10 of them).
MUTANTS_FLAGS    ?=
MUTANTS_UPSTREAM ?= $(UPSTREAM_EPP) --secure-serving=false
MUTANTS_UPSTREAM_FLAGS = --upstream-name "upstream EPP v1.5.0" --upstream-command "$(MUTANTS_UPSTREAM)" \
	--upstream-args "--supported-features $(INTEROP_FEATURES),RequestShedding --skip-tests $(UPSTREAM_SKIP)"
mutants: build
	$(GO) build -tags eppkit_mutants -ldflags "-X github.com/eppkit/eppkit/internal/version.version=$(VERSION)" -o bin/eppkit-mutants ./cmd/eppkit
	./bin/eppkit-mutants tools build k8s && ./bin/eppkit-mutants tools build gie $(if $(MUTANTS_UPSTREAM),,--only crds) || exit 2
	./bin/eppkit-mutants mutants --output reports/mutants.md --log-dir out/mutants $(if $(MUTANTS_UPSTREAM),$(MUTANTS_UPSTREAM_FLAGS)) $(MUTANTS_FLAGS)

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

## lint: go vet (also of the eppkit_mutants build and of examples/gotest), a gofmt check,
# staticcheck (pinned in go.mod as a tool: go tool staticcheck; its checks are the defaults; also
# of the eppkit_mutants build) and a go mod tidy check of the module and of examples/gotest (go
# mod tidy -diff prints what tidy would change; direct dependencies must be direct).
# MUTANT_PKGS are the packages whose files differ in the eppkit_mutants build.
MUTANT_PKGS := ./selfcheck/mutant/... ./cmd/eppkit ./reference/... ./suites/pluginstate ./suites/equivalence ./suites/dag
lint:
	$(GO) vet ./...
	$(GO) vet -tags eppkit_mutants $(MUTANT_PKGS)
	cd examples/gotest && $(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) tool staticcheck ./...
	$(GO) tool staticcheck -tags eppkit_mutants $(MUTANT_PKGS)
	@$(GO) mod tidy -diff || { echo "lint: go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	@cd examples/gotest && $(GO) mod tidy -diff || { echo "lint: examples/gotest's go.mod/go.sum are not tidy: run go mod tidy there"; exit 1; }

## bench: Go benchmarks of the hot paths
bench:
	$(GO) test -run='^$$' -bench=. -benchmem $(PKGS_UNIT)

## manifests: regenerate the generated copies in manifests/k8s (the GIE CRDs from the pinned module,
# the Envoy ConfigMap from manifests/envoy/envoy.yaml); `go test ./manifests` checks them
manifests:
	EPPKIT_UPDATE_MANIFESTS=1 $(GO) test -count=1 -run 'TestCRDsEqualPinnedModule|TestEnvoyConfigMapIsBootstrap' ./manifests

## image: build the single eppkit image (Dockerfile, FROM scratch: no pull) as $(IMAGE) with the
# container engine $(ENGINE): the static binary, the CA bundle and tmp/ are staged in out/image/.
IMAGE  ?= eppkit:dev
ENGINE ?= docker
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
image:
	rm -rf out/image && mkdir -p out/image/root/tmp out/image/root/etc/ssl/certs && chmod 1777 out/image/root/tmp
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags "-s -w -X github.com/eppkit/eppkit/internal/version.version=$(VERSION)" -o out/image/root/eppkit ./cmd/eppkit
	cp $(CA_BUNDLE) out/image/root/etc/ssl/certs/ca-certificates.crt
	tar -C out/image/root --owner=0 --group=0 --numeric-owner -cf out/image/rootfs.tar .
	$(ENGINE) build -f Dockerfile -t $(IMAGE) out/image

clean:
	rm -rf bin out
