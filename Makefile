# eppkit — see README.md. Every target installs what it needs through the Go toolchain.
GO        ?= go
GINKGO    := $(GO) run github.com/onsi/ginkgo/v2/ginkgo
PKGS_UNIT := $(shell $(GO) list ./... | grep -v /suites/)
# suites/e2e needs a cluster: it runs in `make e2e`, not in `make suites`.
SUITES    := $(filter-out suites/e2e/,$(wildcard suites/*/))
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GINKGO_FLAGS ?=

.PHONY: e2e-framework conformance-cluster
.PHONY: proto all build test unit suites example conformance conformance-upstream interop interop-tools $(INTEROP_RUNS) catalogue tools tools-llmd-router lint bench clean manifests image mutants flake-check e2e

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
# upstream EPP, GIE v1.6.0's and v1.6.2's lwepp, llm-d-inference-sim v0.10.2 and llm-d-router
# v0.10.0 (from the source snapshot in
# ../shared/thirdparty, or $$EPPKIT_THIRDPARTY_DIR: SKIPPED with a message when it is missing).
# Cached by version: a second run only prints the paths. A cold build takes about an hour
# on an idle 2-core machine (the simulator about 40 minutes of it); TOOLS_FLAGS=--p=1 lowers peak
# memory. The kind node image itself is built apart (`eppkit tools build kind-node`: it needs a
# container engine and Debian's debootstrap).
TOOLS_FLAGS ?=
tools: build
	./bin/eppkit tools build k8s --all $(TOOLS_FLAGS)
	./bin/eppkit tools build gie $(TOOLS_FLAGS)
	./bin/eppkit tools build gie-v1.6.0 $(TOOLS_FLAGS)
	./bin/eppkit tools build gie-v1.6.2 $(TOOLS_FLAGS)
	./bin/eppkit tools build sim $(TOOLS_FLAGS)
	@$(LLMD_ROUTER_BUILD)

# LLMD_ROUTER_BUILD builds llm-d-router v0.10.0 from its source snapshot (a no-op once cached). When
# the snapshot is missing (`eppkit tools build` exit 4, its message names the file) it prints
# "<target>: SKIPPED: ..." and ends the recipe line with exit 0, so a run that needs it is
# reported skipped, never passed; any other failure (a checksum mismatch) fails the target.
LLMD_ROUTER_BUILD = rc=0; ./bin/eppkit tools build llmd-router $(TOOLS_FLAGS) || rc=$$?; \
	if [ $$rc -eq 4 ]; then echo "$@: SKIPPED: the llm-d-router v0.10.0 source snapshot is missing (the eppkit error above names the file; EPPKIT_THIRDPARTY_DIR sets its directory, docs/tools.md)"; exit 0; fi; \
	[ $$rc -eq 0 ] || exit $$rc

## tools-llmd-router: llm-d-router v0.10.0 alone (.ci/run's tool stage); SKIPPED without its snapshot.
tools-llmd-router: build
	@$(LLMD_ROUTER_BUILD)

## interop: the suite against EPPs nobody here wrote (issue 9; reports/interop/README.md explains
# every failure). Each run starts the fleet, a local kube-apiserver + etcd holding the InferencePool
# (--endpoint-source apiserver: these EPPs discover only from Kubernetes) and the EPP, runs the
# selected profiles and writes its reports to $(INTEROP_OUT)/<run>/. Each run also passes
# --expect-failures reports/interop/expected-failures/<run>.txt, so the target exits 0 when every
# run failed exactly its explained tests, 1 when a result changed and 2 on a harness error.
# The upstream binaries are built once per machine (tools/gie-v1.5.0, tools/gie-v1.6.0, tools/gie-v1.6.2,
# and llm-d-router from ../shared/thirdparty; docs/tools.md). Older peers stay only where they show
# what the newer ones do not (issue 30): upstream v1.5.0's crash on a malformed usage block, its
# predicted-latency plugins against eppkit predictor, its prefix scores in process; lwepp v1.6.0's
# FULL_DUPLEX_STREAMED bug beside v1.6.2's fix. llm-d-inference-scheduler v0.7.1 (llm-d's EPP before
# it moved to llm-d-router) and upstream v1.5.0's default, TLS and LoRA runs were retired: llm-d-router
# v0.10.0 shows everything they showed.
# To add a run: a sub-target calling $(call interop_run,<run>,<command template>,<flags>), its
# expected-failures file, a README section, and its name in INTEROP_RUNS. Arguments containing
# commas go through variables (make splits $(call) arguments on commas).
INTEROP_OUT      ?= reports/interop
INTEROP_EXPECT   := reports/interop/expected-failures
# The features the interop runs claim: the routing features these EPPs' default configs can show,
# and every EPP-Production feature, so the reports say which production rules upstream keeps.
INTEROP_FEATURES ?= OpenAIRequestParsing,PrefixCacheAffinity,QueueAwareness,KVCacheAwareness,LoRAAffinity,SubsetHintIPMatching,$(PRODUCTION_FEATURES)
PRODUCTION_FEATURES := RequestIDIsolation,StreamSurvivesRefusal,StaleEndpointFiltering,SLOHeaderValidation,LegacyKVCacheMetric,EngineSeriesAggregation,AnthropicMessages,TokenIDPrompts,MultimodalPrefixIdentity,PartialBlockHashing,RequestHeaderOverwrite
INTEROP_FLAGS    ?=
INTEROP_FLAGS_PREDICTOR ?=
INTEROP_RUNS     := interop-llmd-router-v0.10.0 interop-llmd-router-v0.10.0-tls interop-llmd-router-v0.10.0-lora \
	interop-llmd-router-v0.10.0-static interop-llmd-router-v0.10.0-optimized-baseline \
	interop-llmd-router-v0.10.0-predicted-latency interop-llmd-router-v0.10.0-flow-control \
	interop-llmd-router-v0.10.0-precise-prefix interop-llmd-router-v0.10.0-grpc \
	interop-lwepp-v1.6.2 interop-lwepp-v1.6.0 interop-upstream-epp-v1.5.0-usage-crash interop-predictor-parity \
	interop-score-parity interop-prefix-parity interop-token-load-parity interop-sim
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
# lwepp v1.6.2: the same flags (its pkg/lwepp/server/options.go is v1.6.0's) plus --health-checking.
LWEPP_162        := KUBECONFIG={{.Kubeconfig}} exec $$(./bin/eppkit tools path gie-v1.6.2 lwepp) --pool-name {{.PoolName}} \
	--pool-namespace {{.PoolNamespace}} --secure-serving=false --health-checking --grpc-port {{.GRPCPort}} \
	--grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}}
# llm-d-router v0.10.0's EPP (built from ../shared/thirdparty, tools: llmd-router). Flags:
# pkg/epp/server/options.go of its source; kubeconfig from $$KUBECONFIG (controller-runtime's
# GetConfig in cmd/epp/runner/runner.go, Run). --tracing=false skips InitTracing
# (pkg/common/observability/tracing/telemetry.go), the only place that sets up an OTLP exporter
# (default endpoint localhost:4317); --drain-timeout=0s stops it at once on SIGTERM instead of
# serving 30 s more.
LLMD_ROUTER_EPP_TLS := KUBECONFIG={{.Kubeconfig}} exec $$(./bin/eppkit tools path llmd-router epp) \
	--pool-name {{.PoolName}} --pool-namespace {{.PoolNamespace}} --metrics-endpoint-auth=false \
	--tracing=false --drain-timeout=0s --grpc-port {{.GRPCPort}} --grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}}
LLMD_ROUTER_EPP  := $(LLMD_ROUTER_EPP_TLS) --secure-serving=false
LLMD_ROUTER_URL  := https://github.com/llm-d/llm-d-router
LLMD_ROUTER_IMPL := --organization llm-d --url $(LLMD_ROUTER_URL) --contact $(LLMD_ROUTER_URL)/issues
LLMD_ROUTER_VERSION := --project llm-d-router --version v0.10.0
# Its approx-prefix-cache-producer keys plugin state by x-request-id as v1.5.0's does (GIE #1489), so
# DuplicateRequestIDIsolated's result against it is a race (failed 2 of 4 runs): skipped, not
# expected (DuplicateRequestIDBodiesIsolated, the same rule without prefix affinity, runs).
LLMD_ROUTER_SKIP := DuplicateRequestIDIsolated
# The default run also claims HighAvailability, with its own leader election (a variable: a literal
# comma would split the $(call) arguments).
LLMD_ROUTER_HA_FEATURES = $(INTEROP_FEATURES),HighAvailability

# llm-d-router in file-discovery mode (no Kubernetes; cmd/epp/runner/runner.go, runWithFileDiscovery,
# taken when the config names a discovery plugin): LLMD_ROUTER_STATIC_SH, run by the target's shell
# with the static source's {{.Endpoints}} and {{.LogDir}}, writes the endpoints file of its
# file-discovery plugin (pkg/epp/framework/plugins/datalayer/discovery/file/README.md: name, address,
# port as a string) and a config with the default config's scorers and weights
# (pkg/epp/config/loader/defaults.go, loadDefaultConfig) plus that plugin into the log dir, prints
# both to target.log, and execs the EPP with the rest of its arguments. With LLMD_ROUTER_CONFIG_TEMPLATE
# set, the config is that file with @ENDPOINTS_FILE@ and @RENDER_URL@ (http:// and the pool's first
# endpoint) replaced. --pool-name is still required
# (server/options.go, Validate: pool-name or endpoint-selector); it only labels metrics here.
define LLMD_ROUTER_STATIC_SH
set -e
eps=$$1 dir=$$2 epp=$$3
shift 3
f=$$dir/endpoints.yaml
c=$$dir/epp-config.yaml
echo 'endpoints:' > "$$f"
i=0
for ep in $$(echo "$$eps" | tr , ' '); do
	printf '%s\n' "- name: ep$$i" "  address: \"$${ep%:*}\"" "  port: \"$${ep##*:}\"" >> "$$f"
	i=$$((i+1))
done
first=$${eps%%,*}
if [ -n "$$LLMD_ROUTER_CONFIG_TEMPLATE" ]; then
	sed -e "s|@ENDPOINTS_FILE@|$$f|" -e "s|@RENDER_URL@|http://$$first|" "$$LLMD_ROUTER_CONFIG_TEMPLATE" > "$$c"
else
cat > "$$c" <<EOF
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: file-discovery
  parameters:
    path: $$f
dataLayer:
  discovery:
    pluginRef: file-discovery
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
EOF
fi
echo "# $$f:"; cat "$$f"; echo "# $$c:"; cat "$$c"
exec "$$epp" --config-file "$$c" "$$@"
endef
export LLMD_ROUTER_STATIC_SH
LLMD_ROUTER_STATIC_EPP := exec sh -c \"\$$LLMD_ROUTER_STATIC_SH\" llmd-router-static {{.Endpoints}} {{.LogDir}} \
	$$(./bin/eppkit tools path llmd-router epp) --pool-name eppkit-static --pool-namespace eppkit --secure-serving=false \
	--metrics-endpoint-auth=false --tracing=false --drain-timeout=0s --grpc-port {{.GRPCPort}} --grpc-health-port {{.HealthPort}} \
	--metrics-port {{.MetricsPort}}

# interop_run: $(1) run name, $(2) command template, $(3) more eppkit conformance flags, $(4) the
# implementation's --organization/--url/--contact (default: GIE's), $(5) the endpoint source
# (default apiserver).
define interop_run
	./bin/eppkit conformance --target command --endpoint-source $(or $(5),apiserver) --command "$(2)" \
		--report-output $(INTEROP_OUT)/$(1) --log-dir out/interop/$(1) --results-file $(INTEROP_OUT)/$(1)/results.json \
		--expect-failures $(INTEROP_EXPECT)/$(1).txt $(or $(4),$(GIE_IMPL)) $(3) $(INTEROP_FLAGS)
endef

interop: $(INTEROP_RUNS)
	$(MAKE) --no-print-directory interop-matrix
	@if ./bin/eppkit tools path llmd-router epp >/dev/null 2>&1; then \
		echo "interop: every run failed exactly its expected tests ($(INTEROP_EXPECT)/); reports in $(INTEROP_OUT)/"; \
	else \
		echo "interop: every run that ran failed exactly its expected tests ($(INTEROP_EXPECT)/); reports in $(INTEROP_OUT)/"; \
		echo "interop: SKIPPED: the interop-llmd-router-v0.10.0* runs (no llm-d-router source snapshot; docs/tools.md)"; \
	fi

## interop-matrix: regenerate the table of who passes what in reports/interop/README.md from every
# run's results.json and expected-failures file (eppkit conformance matrix); a test in make test
# fails when the committed table is not what the committed results say.
.PHONY: interop-matrix
interop-matrix:
	$(GO) run ./cmd/eppkit conformance matrix $(INTEROP_OUT) --write $(INTEROP_OUT)/README.md

interop-tools: build
	./bin/eppkit tools build k8s
	./bin/eppkit tools build gie
	./bin/eppkit tools build gie-v1.6.0
	./bin/eppkit tools build gie-v1.6.2
	@$(LLMD_ROUTER_BUILD)

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

# (3b) GIE v1.6.2's lwepp: v1.6.0's with the FULL_DUPLEX_STREAMED fixes (GIE #3028, #3033), so
# the usual readiness probe (a chat completion) works; with --health-checking.
interop-lwepp-v1.6.2: interop-tools
	$(call interop_run,lwepp-v1.6.2,$(LWEPP_162),--project lwepp --version v1.6.2 --profiles all \
		--supported-features $(INTEROP_FEATURES))

# (6) llm-d-router v0.10.0 (llm-d's EPP since GIE v1.6.0) with its default config, and its own
# leader election (--ha-enable-leader-election, pkg/epp/server/options.go) for the high-availability
# tests. SKIPPED, exit 0, when the source snapshot is missing.
interop-llmd-router-v0.10.0: interop-tools
	$(LLMD_ROUTER_BUILD); \
	$(call interop_run,llmd-router-v0.10.0,$(LLMD_ROUTER_EPP),$(LLMD_ROUTER_VERSION) --profiles all \
		--supported-features $(LLMD_ROUTER_HA_FEATURES) --skip-tests $(LLMD_ROUTER_SKIP) \
		--leader-election-args=--ha-enable-leader-election,$(LLMD_ROUTER_IMPL))

# (6t) The same with TLS on: its default --secure-serving=true, a self-signed certificate
# (pkg/epp/server/runserver.go; --target-tls insecure); its gRPC health port stays plaintext.
interop-llmd-router-v0.10.0-tls: interop-tools
	$(LLMD_ROUTER_BUILD); \
	$(call interop_run,llmd-router-v0.10.0-tls,$(LLMD_ROUTER_EPP_TLS),$(LLMD_ROUTER_VERSION) --profiles all \
		--supported-features $(INTEROP_FEATURES) --skip-tests $(LLMD_ROUTER_SKIP) --target-tls insecure \
		--target-health-tls plaintext,$(LLMD_ROUTER_IMPL))

# (6a) LoRAAffinity with lora-affinity-scorer enabled (manifests/epp-configs/lora-affinity.yaml).
interop-llmd-router-v0.10.0-lora: interop-tools
	$(LLMD_ROUTER_BUILD); \
	$(call interop_run,llmd-router-v0.10.0-lora,$(LLMD_ROUTER_EPP) --config-file {{.ConfigFile}},$(LLMD_ROUTER_VERSION) \
		--config-file manifests/epp-configs/lora-affinity.yaml --profiles EPP-Routing --supported-features LoRAAffinity \
		--run-test LoRAAffinity,$(LLMD_ROUTER_IMPL))

# (6b) the same config in file-discovery mode: the static source, no Kubernetes (LLMD_ROUTER_STATIC_SH).
interop-llmd-router-v0.10.0-static: interop-tools
	$(LLMD_ROUTER_BUILD); \
	$(call interop_run,llmd-router-v0.10.0-static,$(LLMD_ROUTER_STATIC_EPP),$(LLMD_ROUTER_VERSION) --profiles all \
		--supported-features $(INTEROP_FEATURES) --skip-tests $(LLMD_ROUTER_SKIP),$(LLMD_ROUTER_IMPL),static)

# (6p) its shipped precise-prefix config (manifests/epp-configs/llmd-router-v0.10.0-precise-prefix.yaml
# says what changed) in file-discovery mode: PrecisePrefixCache only, whose pool publishes vLLM KV
# events on tcp://<ip>:5557 and serves the render endpoints its token-producer calls.
interop-llmd-router-v0.10.0-precise-prefix: interop-tools
	$(LLMD_ROUTER_BUILD); \
	$(call interop_run,llmd-router-v0.10.0-precise-prefix,LLMD_ROUTER_CONFIG_TEMPLATE=$(CURDIR)/manifests/epp-configs/llmd-router-v0.10.0-precise-prefix.yaml $(LLMD_ROUTER_STATIC_EPP),$(LLMD_ROUTER_VERSION) \
		--profiles EPP-Routing --supported-features PrecisePrefixCache --run-test PrecisePrefixCache,$(LLMD_ROUTER_IMPL),static)

# (6b') its default plugins as its Helm chart renders them for gRPC model servers (vllmgrpc-parser
# as the only parser; manifests/epp-configs/llmd-router-v0.10.0-grpc.yaml says why file discovery):
# VLLMGRPCRouted on the test's own pool of fake vLLMs serving the gRPC engine API (issue 35 item 4).
LLMD_ROUTER_GRPC_FEATURES := VLLMGRPC,PrefixCacheAffinity
interop-llmd-router-v0.10.0-grpc: interop-tools
	$(LLMD_ROUTER_BUILD); \
	$(call interop_run,llmd-router-v0.10.0-grpc,LLMD_ROUTER_CONFIG_TEMPLATE=$(CURDIR)/manifests/epp-configs/llmd-router-v0.10.0-grpc.yaml $(LLMD_ROUTER_STATIC_EPP),$(LLMD_ROUTER_VERSION) \
		--profiles EPP-Routing --supported-features $(LLMD_ROUTER_GRPC_FEATURES) --run-test VLLMGRPCRouted,$(LLMD_ROUTER_IMPL),static)

# (6c) the config of its optimized-baseline guide, which its nightly perf job deploys: the
# EndpointPickerConfig embedded in the Helm values test/perf/config/router-configs/optimized-baseline.yaml
# of the tree (router.epp.pluginsCustomConfig), cut out with awk (the literal block under its key,
# de-indented): the default scorers and weights plus no-hit-lru-scorer (2) and
# approx-prefix-cache-producer with maxPrefixTokensToMatch 100000.
LLMD_ROUTER_OPTIMIZED := out/interop/llmd-router-v0.10.0-optimized-baseline.yaml
interop-llmd-router-v0.10.0-optimized-baseline: interop-tools
	$(LLMD_ROUTER_BUILD); \
	mkdir -p out/interop; \
	awk '/optimized-baseline-plugins.yaml: \|/ {f=1; match($$0, /^ */); ind=RLENGTH; next} f && /[^ ]/ {match($$0, /^ */); if (RLENGTH <= ind) exit; print substr($$0, ind+3)}' \
		$$(./bin/eppkit tools path llmd-router src)/test/perf/config/router-configs/optimized-baseline.yaml > $(LLMD_ROUTER_OPTIMIZED); \
	grep -q '^kind: EndpointPickerConfig' $(LLMD_ROUTER_OPTIMIZED) || { echo "$@: no EndpointPickerConfig in its optimized-baseline.yaml"; exit 2; }; \
	$(call interop_run,llmd-router-v0.10.0-optimized-baseline,$(LLMD_ROUTER_EPP) --config-file {{.ConfigFile}},$(LLMD_ROUTER_VERSION) \
		--config-file $(LLMD_ROUTER_OPTIMIZED) --profiles all --supported-features $(INTEROP_FEATURES) --skip-tests $(LLMD_ROUTER_SKIP),$(LLMD_ROUTER_IMPL))

# (6d) its shipped flow-control config, deploy/config/soft-reflective-ceiling-epp-config.yaml (the
# configs artifact): the default scorers and weights with the flowControl feature gate and the
# soft-reflective-ceiling usage-limit policy. That policy is an Alpha plugin, which the EPP refuses to
# load without --allow-experimental-plugins (cmd/epp/runner/runner.go, setup:
# fwkplugin.ValidatePluginStability), so the run passes it. The tests whose requests flow control
# holds wait out their timeouts: about 8–9 minutes in all.
# With flow control on, whether a request sent right after SIGTERM meets the flow controller's 503
# rejected-shutting-down or the stopped process (--drain-timeout=0s) is a race (ReferenceDrainRefusesNewRequests
# failed 1 of 2 runs): skipped in this run.
LLMD_ROUTER_FC_SKIP := $(LLMD_ROUTER_SKIP),ReferenceDrainRefusesNewRequests
.PHONY: interop-llmd-router-v0.10.0-flow-control
interop-llmd-router-v0.10.0-flow-control: interop-tools
	$(LLMD_ROUTER_BUILD); \
	$(call interop_run,llmd-router-v0.10.0-flow-control,$(LLMD_ROUTER_EPP) --allow-experimental-plugins --config-file {{.ConfigFile}},$(LLMD_ROUTER_VERSION) \
		--config-file $$(./bin/eppkit tools path llmd-router configs)/soft-reflective-ceiling-epp-config.yaml --profiles all \
		--supported-features $(INTEROP_FEATURES) --skip-tests $(LLMD_ROUTER_FC_SKIP),$(LLMD_ROUTER_IMPL))

# (6p) its predicted-latency config: the plugins and profile its Helm chart renders with
# router.latencyPredictor.enabled (manifests/epp-configs/llmd-router-v0.10.0-predicted-latency.yaml),
# PREDICTION_SERVER_URL and TRAINING_SERVER_URL both at the harness's `eppkit predictor` sidecar
# ({{.PredictorURL}}; the chart's two sidecars, config/charts/routerlib/templates/_latency-predictor.tpl).
# Training entries are flushed and the predictor's status read every second
# (LATENCY_FLUSH_INTERVAL_SEC, LATENCY_METRICS_INTERVAL_SEC: latencypredictorclient/types.go).
# EPP-Routing with PredictedLatency claimed: the tests of that feature and the unclaimed routing rules.
LLMD_ROUTER_PL_ENV := PREDICTION_SERVER_URL={{.PredictorURL}} TRAINING_SERVER_URL={{.PredictorURL}} \
	LATENCY_FLUSH_INTERVAL_SEC=1 LATENCY_METRICS_INTERVAL_SEC=1
.PHONY: interop-llmd-router-v0.10.0-predicted-latency
interop-llmd-router-v0.10.0-predicted-latency: interop-tools
	$(LLMD_ROUTER_BUILD); \
	$(call interop_run,llmd-router-v0.10.0-predicted-latency,$(LLMD_ROUTER_PL_ENV) $(LLMD_ROUTER_EPP) --config-file {{.ConfigFile}},$(LLMD_ROUTER_VERSION) \
		--config-file manifests/epp-configs/llmd-router-v0.10.0-predicted-latency.yaml --profiles EPP-Routing \
		--supported-features PredictedLatency,$(LLMD_ROUTER_IMPL))

# (4) predictor parity: the upstream EPP v1.5.0 with its predicted-latency plugins
# (manifests/epp-configs/upstream-v1.5.0-predicted-latency.yaml) and PREDICTION_SERVER_URL /
# TRAINING_SERVER_URL pointing at `eppkit predictor` gets predictions from the trained model.
interop-predictor-parity: interop-tools
	@mkdir -p $(INTEROP_OUT)/predictor-parity
	./bin/eppkit interop predictor-parity --report $(INTEROP_OUT)/predictor-parity/summary.md $(INTEROP_FLAGS_PREDICTOR)

## interop-prefix-parity, interop-token-load-parity: the reference and llm-d-router v0.10.0, each
# with one scorer and --emit-endpoint-scores, given the same seeded request history; their
# published scores compared request by request (selfcheck/scoreparity): approximate prefix scores;
# token-load and active-request scores over requests held in flight. Exits 1 when a request kind
# whose scores must agree differs; the kinds that differ are named with their rule in
# $(INTEROP_OUT)/<study>-parity/summary.md. A random seed each run (printed); SEED=n fixes it.
interop-prefix-parity interop-token-load-parity: interop-%-parity: interop-tools
	$(LLMD_ROUTER_BUILD); \
	mkdir -p $(INTEROP_OUT)/$*-parity && \
	./bin/eppkit interop $*-parity --seed $(or $(SEED),$(EPPKIT_SEED),0) --log-dir out/interop/score-parity \
		--report $(INTEROP_OUT)/$*-parity/summary.md

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
		--report-output $(INTEROP_OUT)/sim-v0.10.2 --log-dir out/interop/sim-v0.10.2 --results-file $(INTEROP_OUT)/sim-v0.10.2/results.json \
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

## conformance-upstream: the llm-d-router v0.10.0 run of make interop alone (reports in
# reports/interop/llmd-router-v0.10.0/); exits 0 when it fails exactly its explained tests.
conformance-upstream: interop-llmd-router-v0.10.0

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
# with the tag eppkit_mutants (the normal build cannot select a mutant). After a baseline per lane
# (the whole registry), every protocol mutant runs its targeted test behind the mutant interceptor (selfcheck/mutant/interceptor) in
# front of the reference AND of llm-d-router v0.10.0, the upstream EPP (judged on the tests it passes on its
# own baseline, with the interop run's features and RequestShedding); every other black-box mutant runs its test against the
# reference with EPPKIT_MUTANT set (wrapper plugins, decorated sources, the hooks left in
# reference/); every white-box mutant its suite. Exit 1 when a mutant escapes the test that targets
# it. MUTANTS_FLAGS="--only kv-ignored" runs one, "--whole-registry" runs every test for each mutant
# (to list every test a mutant fails; each run then takes 40 s to 4 min); MUTANTS_UPSTREAM= leaves the upstream lane out (so
# does a missing llm-d-router source snapshot: the lane is reported SKIPPED). Took 21 min 36 s on
# this 2-core machine (2026-12-05: 5 baselines, 115 mutant runs, most of 0–8 s and the two
# precise-prefix ones 2–3 min, the upstream lane included).
MUTANTS_FLAGS    ?=
MUTANTS_UPSTREAM ?= $(LLMD_ROUTER_EPP)
MUTANTS_UPSTREAM_FLAGS = --upstream-name "llm-d-router v0.10.0" --upstream-command "$(MUTANTS_UPSTREAM)" \
	--upstream-args "--supported-features $(INTEROP_FEATURES),RequestShedding --skip-tests $(LLMD_ROUTER_SKIP)"
mutants: build
	$(GO) build -tags eppkit_mutants -ldflags "-X github.com/eppkit/eppkit/internal/version.version=$(VERSION)" -o bin/eppkit-mutants ./cmd/eppkit
	./bin/eppkit-mutants tools build k8s && ./bin/eppkit-mutants tools build gie --only crds || exit 2
	@upstream='$(if $(MUTANTS_UPSTREAM),yes)'; \
	if [ -n "$$upstream" ]; then rc=0; ./bin/eppkit-mutants tools build llmd-router || rc=$$?; \
		if [ $$rc -eq 4 ]; then echo "mutants: SKIPPED: the llm-d-router lane (no source snapshot; docs/tools.md)"; upstream=; \
		elif [ $$rc -ne 0 ]; then exit 2; fi; \
	fi; \
	if [ -n "$$upstream" ]; then \
		./bin/eppkit-mutants mutants --output reports/mutants.md --log-dir out/mutants $(MUTANTS_UPSTREAM_FLAGS) $(MUTANTS_FLAGS); \
	else \
		./bin/eppkit-mutants mutants --output reports/mutants.md --log-dir out/mutants $(MUTANTS_FLAGS); \
	fi

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
## proto: regenerate internal/vllmgrpc's Go code from engine.proto (vLLM's gRPC engine API). The
# output is committed and nothing else runs protoc (CI does not need it). Needs protoc (Debian
# protobuf-compiler 3.21.12 made the committed files), protoc-gen-go@v1.36.12 (go.mod's
# google.golang.org/protobuf) and protoc-gen-go-grpc@v1.6.0 on PATH:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
proto:
	cd internal/vllmgrpc && PATH="$$PATH:$$($(GO) env GOPATH)/bin" $(GO) generate .

lint:
	$(GO) vet ./...
	$(GO) vet -tags eppkit_mutants $(MUTANT_PKGS)
	cd examples/gotest && $(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) tool staticcheck ./...
	$(GO) tool staticcheck -tags eppkit_mutants $(MUTANT_PKGS)
	@$(GO) mod tidy -diff || { echo "lint: go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	@cd examples/gotest && $(GO) mod tidy -diff || { echo "lint: examples/gotest's go.mod/go.sum are not tidy: run go mod tidy there"; exit 1; }
	@cd tools/gie-v1.5.0/score-parity && GOWORK=off $(GO) mod tidy -diff || { echo "lint: tools/gie-v1.5.0/score-parity requires the main module: a change of its go.mod needs go mod tidy there too"; exit 1; }

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
