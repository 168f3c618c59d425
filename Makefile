# eppkit — see README.md. Every target installs what it needs through the Go toolchain.
GO        ?= go
GINKGO    := $(GO) run github.com/onsi/ginkgo/v2/ginkgo
PKGS_UNIT := $(shell $(GO) list ./... | grep -v /suites/)
SUITES    := $(wildcard suites/*/)
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GINKGO_FLAGS ?=

.PHONY: all build test unit suites conformance lint bench clean

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
# Runs every profile against the reference EPP (bin/eppkit reference-epp) with every feature claimed;
# reports go to out/reports/. CONFORMANCE_SOURCE=apiserver discovers through a local kube-apiserver.
# The reference's config is its defaults plus lora-affinity-scorer (it claims LoRAAffinity too).
CONFORMANCE_SOURCE ?= static
CONFORMANCE_CONFIG ?= manifests/epp-configs/lora-affinity.yaml
CONFORMANCE_FLAGS  ?=
conformance: build
	./bin/eppkit conformance --target reference --endpoint-source $(CONFORMANCE_SOURCE) \
		--config-file $(CONFORMANCE_CONFIG) \
		--profiles all --all-features --report-output out/reports --log-dir out/conformance \
		--organization eppkit --project reference-epp --url https://github.com/eppkit/eppkit \
		--version $(VERSION) --contact https://github.com/eppkit/eppkit/issues $(CONFORMANCE_FLAGS)

## lint: go vet and a gofmt check
lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## bench: Go benchmarks of the hot paths
bench:
	$(GO) test -run='^$$' -bench=. -benchmem $(PKGS_UNIT)

clean:
	rm -rf bin out
