# gridsync: `make demo` runs the main job, `make test` runs every test.
# Every tool is built from pinned Go modules by the targets below.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
comma     := ,
TOOLS_DIR := $(CURDIR)/.tools
BIN_DIR   := $(CURDIR)/bin

# Pinned linter, built from the Go module proxy into .tools/.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT         := $(TOOLS_DIR)/lint/$(GOLANGCI_LINT_VERSION)/golangci-lint

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
# Static binaries: the images are distroless and have no libc.
BUILD   := CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)"

# Pinned code generator for the controller's API: deepcopy functions and
# CRD manifests.
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN         := $(TOOLS_DIR)/controller-gen/$(CONTROLLER_GEN_VERSION)/controller-gen
API_PATHS              := ./api/...
CRD_DIR                := charts/gridsync-agent/files/crds

# Pinned Helm, built from the Go module proxy into .tools/, for the chart
# tests.
HELM_VERSION := v3.22.0
HELM         := $(TOOLS_DIR)/helm/$(HELM_VERSION)/helm
export GRIDSYNC_HELM := $(HELM)

# Every benchmark at its smallest size (test/measure): make test and
# make bench-smoke run them so, to prove they still run.
MEASURE_SMOKE := GRIDSYNC_BENCH_SMOKE=1

# Where the integration tests find kube-apiserver and etcd.
export GRIDSYNC_TOOLS_BIN := $(TOOLS_DIR)/bin

# Pinned kustomize (hack/tools/kustomize), beside the servers: make lint
# builds the kustomize base's flavours with it, the chart tests apply what
# it builds.
KUSTOMIZE := $(GRIDSYNC_TOOLS_BIN)/kustomize

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-17s %s\n", $$1, $$2}'

.PHONY: build
build: ## build the binaries into bin/
	$(BUILD) -o $(BIN_DIR)/gridsync-sidecar ./cmd/gridsync-sidecar
	$(BUILD) -o $(BIN_DIR)/gridsync-init ./cmd/gridsync-init
	$(BUILD) -o $(BIN_DIR)/gridsync-agent ./cmd/gridsync-agent

# The images: one OCI layout per image in IMAGES_DIR, an image index of
# IMAGE_PLATFORMS with the OCI labels, an SPDX SBOM and SLSA provenance
# attached, built
# without a container engine from the static binaries. The same sources
# give the same digests: every time in them is SOURCE_DATE_EPOCH (the last
# commit's).
IMAGES_DIR        ?= $(BIN_DIR)/images
IMAGE_PLATFORMS   := linux/amd64 linux/arm64
REVISION          ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
SOURCE_URL        ?= https://github.com/gridsync/gridsync
# The registry and folder the images are named under, as the charts'
# default image repositories name them.
IMAGE_REGISTRY    ?= ghcr.io/gridsync
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

.PHONY: images
images: ## the shipped images for linux/amd64 and linux/arm64 as OCI layouts (with labels, SBOM and provenance) in IMAGES_DIR (bin/images), reproducibly, without a container engine
	@# make build for each platform, into <bin>/<os>-<arch>/.
	@for p in $(IMAGE_PLATFORMS); do \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(MAKE) --no-print-directory build BIN_DIR="$(BIN_DIR)/$${p%/*}-$${p#*/}" VERSION=$(VERSION); \
	done
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./hack/images/build --bin $(BIN_DIR) --platforms "$(subst $(eval) ,$(comma),$(IMAGE_PLATFORMS))" \
		--out $(IMAGES_DIR) --registry $(IMAGE_REGISTRY) --tag $(VERSION) --version $(VERSION) --revision $(REVISION) --source $(SOURCE_URL)

# The agent's kustomize platform base, generated from the agent chart with
# the platform's values, and its flavours (overlays): make lint checks the
# base is current and that each overlay builds to what the chart renders
# with its values.yaml. And the release folder.
KUSTOMIZE_ROOT   := deploy/kustomize
KUSTOMIZE_DIR    := $(KUSTOMIZE_ROOT)/gridsync-agent
KUSTOMIZE_VALUES := $(KUSTOMIZE_ROOT)/platform-values.yaml
RELEASE_DIR      ?= $(BIN_DIR)/release

.PHONY: kustomize
kustomize: $(HELM) ## rewrite the agent's kustomize platform base (deploy/kustomize/gridsync-agent) from the agent chart and deploy/kustomize/platform-values.yaml
	$(GO) run ./hack/release kustomize -values $(KUSTOMIZE_VALUES) $(KUSTOMIZE_DIR)

.PHONY: release
release: $(HELM) ## everything a release ships, in RELEASE_DIR (bin/release): the image layouts, the two charts packaged with the images' digests (byte for byte the same for the same commit), the CRDs, the kustomize base and its flavours, SHA256SUMS
	rm -rf $(RELEASE_DIR)
	@$(MAKE) --no-print-directory images IMAGES_DIR=$(RELEASE_DIR)/images
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./hack/release assemble -images $(RELEASE_DIR)/images -kustomize $(KUSTOMIZE_ROOT) -out $(RELEASE_DIR) -version $(VERSION)
	@echo "release: $(RELEASE_DIR) (SHA256SUMS lists every file)"

# make publish pushes RELEASE_DIR to the registry the images are named
# under (IMAGE_REGISTRY), or to REGISTRY (host:port) under the same
# repositories; REGISTRY_CA is a CA file to trust for REGISTRY's
# certificate. PUBLISHED records what was pushed.
#
# It signs what it pushes as cosign does with SIGNING_KEY: a key from
# `cosign generate-key-pair` (cosign.key, its password in COSIGN_PASSWORD)
# or an unencrypted PKCS #8 PEM key. Without one it refuses to publish,
# unless UNSIGNED=1 says to publish without signatures.
#
# make verify checks, with PUBLIC_KEY (cosign.pub) and the registry alone,
# every image and chart PUBLISHED records, or the references in REFS
# (repository:tag or repository@digest), at REGISTRY when it is given.
REGISTRY    ?=
REGISTRY_CA ?=
PUBLISHED   ?= $(BIN_DIR)/published.json
SIGNING_KEY ?=
UNSIGNED    ?=
PUBLIC_KEY  ?=
REFS        ?=

.PHONY: publish
publish: ## push what make release wrote to its registry or REGISTRY=host:port, by digest: each image index with its SBOM and provenance as referrers, the charts as OCI artifacts (oci://<registry>/gridsync/charts/<chart>); signs each index and chart and attests each provenance as cosign does with SIGNING_KEY=cosign.key (COSIGN_PASSWORD), refuses without one unless UNSIGNED=1; prints each reference with its digest, pushes nothing already there
	$(GO) run ./hack/release publish -release $(RELEASE_DIR) -record $(PUBLISHED) $(if $(REGISTRY),-registry $(REGISTRY)) $(if $(REGISTRY_CA),-ca $(REGISTRY_CA)) \
		$(if $(SIGNING_KEY),-key $(SIGNING_KEY)) $(if $(UNSIGNED),-unsigned=$(UNSIGNED))

.PHONY: verify
verify: ## check offline, with PUBLIC_KEY=cosign.pub, what make publish pushed (PUBLISHED) or REFS="<ref> ...": each tag names the digest published, each image and chart is signed by the key, each image's provenance attested (as cosign verify --key and verify-attestation do, without a transparency log)
	$(GO) run ./hack/release verify $(if $(PUBLIC_KEY),-key $(PUBLIC_KEY)) $(if $(REFS),,-record $(PUBLISHED)) $(if $(REGISTRY),-registry $(REGISTRY)) $(if $(REGISTRY_CA),-ca $(REGISTRY_CA)) $(REFS)

.PHONY: demo
demo: tools build ## the main job end to end: kube-apiserver, init, sidecar, then the agent publishing from Grid resources
	$(GO) run ./demo --bin $(BIN_DIR)

.PHONY: tools
tools: $(HELM) $(KUSTOMIZE) ## build the pinned kube-apiserver, etcd, helm, kustomize and the node (kubelet, controller manager, scheduler, containerd, CNI plugins; runc and nft from Debian), promtool and the Prometheus server, the OCI registry the publishing test pushes to and cosign, which checks its signatures, and cert-manager's controller and CRDs for the test of the cert-manager recipe (cached; many minutes when cold)
	@GRIDSYNC_TOOLS_DIR=$(TOOLS_DIR) hack/tools/build.sh

$(HELM):
	@echo "tools: building helm $(HELM_VERSION) (once; a minute or two when cold)"
	GOBIN=$(dir $@) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

# Rebuilt when its module changes.
$(KUSTOMIZE): hack/tools/kustomize/go.mod hack/tools/kustomize/go.sum
	@echo "tools: building kustomize (once; about a minute when cold)"
	cd hack/tools/kustomize && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $@ sigs.k8s.io/kustomize/kustomize/v5

$(GOLANGCI_LINT):
	@echo "lint: building golangci-lint $(GOLANGCI_LINT_VERSION) (once; about a minute when cold)"
	GOBIN=$(dir $@) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(CONTROLLER_GEN):
	@echo "generate: building controller-gen $(CONTROLLER_GEN_VERSION) (once)"
	GOBIN=$(dir $@) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

.PHONY: generate
generate: $(CONTROLLER_GEN) ## regenerate the API's deepcopy functions and CRD manifests
	$(CONTROLLER_GEN) object paths=$(API_PATHS) crd:crdVersions=v1,allowDangerousTypes=true output:crd:dir=$(CRD_DIR)

CHARTS := charts/praxis-gateway charts/gridsync-agent

.PHONY: docs
docs: ## rewrite the charts' values tables (their READMEs) from values.schema.json and values.yaml
	$(GO) run ./hack/valuesdoc $(CHARTS)

.PHONY: verify-generated
verify-generated: $(CONTROLLER_GEN) ## fail when the committed generated files differ from the types
	@out="$$(mktemp -d)"; trap 'rm -rf "$$out"' EXIT; \
	$(CONTROLLER_GEN) object paths=$(API_PATHS) output:object:dir="$$out/object" crd:crdVersions=v1,allowDangerousTypes=true output:crd:dir="$$out/crds"; \
	diff -u api/v1alpha1/zz_generated.deepcopy.go "$$out/object/zz_generated.deepcopy.go" && \
	diff -ru -x "*.go" $(CRD_DIR) "$$out/crds" || { echo "generated files are stale: run make generate"; exit 1; }

.PHONY: lint
lint: $(GOLANGCI_LINT) $(HELM) $(KUSTOMIZE) verify-generated ## gofmt, go vet, golangci-lint (the layer rules included), generated files, the charts' values tables, the kustomize base current and its overlays matching the chart
	@unformatted="$$(gofmt -l $$(git ls-files '*.go'))"; \
	if [[ -n "$$unformatted" ]]; then echo "gofmt: these files need formatting:"; echo "$$unformatted"; exit 1; fi
	@# go vet compiles every dependency for its export data: in the mode
	@# the test binaries' processes are built in (testbin: static,
	@# trimmed), so that one compile serves both.
	CGO_ENABLED=0 $(GO) vet -trimpath ./...
	$(GOLANGCI_LINT) run ./...
	$(GO) run ./hack/valuesdoc -check $(CHARTS)
	$(GO) run ./hack/release kustomize -check -values $(KUSTOMIZE_VALUES) -overlays $(KUSTOMIZE_ROOT)/overlays -kustomize $(KUSTOMIZE) $(KUSTOMIZE_DIR)

.PHONY: test
test: ## every test, the integration tests against the real kube-apiserver included, and the lint
	@# The pinned tools and the linter are built side by side: each has
	@# phases (downloads, links) that leave a core idle, which the other
	@# fills. Then the binaries the tests run, and hack/test.sh: it starts
	@# the node tests first (the longest package), lints beside them, then
	@# runs the other tests and the benchmarks' smoke.
	@$(MAKE) --no-print-directory -j2 --output-sync=target tools $(GOLANGCI_LINT) $(CONTROLLER_GEN)
	@$(MAKE) --no-print-directory testbins
	@# testreport prints what go test prints, each package's slowest test
	@# on its ok line, and the slowest packages at the end.
	$(GO) build -o $(TOOLS_DIR)/testreport ./hack/testreport
	GO=$(GO) MAKE="$(MAKE)" hack/test.sh $(TOOLS_DIR)/testreport

.PHONY: test-fast
test-fast: ## the edit loop: the packages' own tests that need no API server, node or built binary (the suites under test/ and the images' reproducibility are left to make test; no -race, results cached)
	$(GO) test $$($(GO) list -test -f '{{if .ForTest}}{{.ForTest}} {{join .Deps " "}}{{end}}' ./... | \
		awk '{ p[$$1] = 1 } / github.com\/gridsync\/gridsync\/test\/(controlplane|testbin|testproc|testnode)( |$$)/ { heavy[$$1] = 1 } \
		END { for (k in p) if (!(k in heavy)) print k }' | grep -vE '/gridsync/(test/|hack/images$$)' | sort)

.PHONY: testbins
testbins: ## build the binaries the tests run as processes (shared by the test packages, rebuilt when the sources change)
	$(GO) run ./test/testbin/prebuild

.PHONY: golden
golden: $(HELM) ## rewrite the charts' golden files from what they render now (review the diff)
	$(GO) test ./test/charts -count=1 -update

.PHONY: bench
bench: tools ## benchmarks: validation, atomic publish, delivery end to end, the controller, consumer config, the fleet, SWIM membership on loopback and over an emulated WAN, the exchanges between two sites over that WAN, site trust, eviction across sites, provider scrapes, admission, rollout evidence, pods on a real node; every step runs, the failed ones are named at the end
	GO=$(GO) test/bench/run.sh

.PHONY: bench-smoke
bench-smoke: tools ## every benchmark at its smallest size, in one process per package (make test does this too): proves they run, measures nothing
	$(MEASURE_SMOKE) $(GO) test -count=1 -run '^$$' -bench . -benchtime 1x -timeout 30m ./...

# The standing attack suite: each attack of the hardening rounds against
# the real binaries on loopback, one line each. `make test` runs its short
# form (the same attacks, smaller counts).
.PHONY: attack
attack: tools ## the attack suite at full size: one line per attack (attack name=... held=true|false), non-zero when one is not held
	ATTACK_FULL=1 $(GO) test ./test/attack -count=1 -v -timeout 30m | grep -E '^(attack |--- FAIL|FAIL|ok|panic)'

# The soak's duration and seed; an empty SEED draws one (printed).
DURATION ?= 10m
SEED ?=

.PHONY: soak
soak: tools ## the fault-injection soak: the real sidecar and agent, one seed (SEED, random when empty) for DURATION (10m)
	SOAK_SEED=$(if $(SEED),$(SEED),$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')) SOAK_DURATION=$(DURATION) \
		$(GO) test ./test/soak -run '^TestSoak$$' -count=1 -v -timeout 0

.PHONY: fuzz
fuzz: ## fuzz the envelope validator, its canonical form, the gossip decoder and the signals feed, a minute each
	$(GO) test ./shared/envelope -run '^$$' -fuzz FuzzValidate -fuzztime 60s
	$(GO) test ./shared/envelope -run '^$$' -fuzz FuzzCanonicalMatchesLibrary -fuzztime 60s
	$(GO) test ./gossip/record -run '^$$' -fuzz FuzzDecode -fuzztime 60s
	$(GO) test ./signals -run '^$$' -fuzz FuzzScrapeIsServedForItsSourceOnly -fuzztime 60s

.PHONY: clean
clean: ## remove built binaries (the pinned servers stay cached in .tools/)
	rm -rf $(BIN_DIR)
