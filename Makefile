# tokenwire: build, test and run the collector with the tokenwire eBPF receiver.
# Everything here runs as root (BPF programs are loaded), on Debian 12 with Go
# at /usr/local/go; `make deps` installs the rest.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build
.DELETE_ON_ERROR:

BUILD_DIR   := _build
BIN_DIR     := $(BUILD_DIR)/bin
COLLECTOR   := $(BUILD_DIR)/tokenwire
OCB         := $(BIN_DIR)/builder
OCB_VERSION := v0.165.0
CONFIG      := config.yaml

# The BPF compiler and its flags, for every bpf2go line in the tree: the
# go:generate lines read them as $BPF_CLANG and $BPF_CFLAGS (and stop with a
# pointer here when they are unset), so the committed objects come from one
# compiler with one set of flags and check-generated compares like with like.
# bpf2go derives llvm-strip-$(LLVM_VERSION) from the compiler's name.
LLVM_VERSION := 19
BPF_CLANG    := clang-$(LLVM_VERSION)
BPF_CFLAGS   := -O2 -g -Wall -Werror
export BPF_CLANG BPF_CFLAGS

# Debian packages: clang/llvm compile the BPF C (bpf2go), libbpf-dev and
# bpftool for headers and BTF dumps, iproute2 for the network-namespace tests,
# git for check-generated, uvicorn/starlette/FastAPI for the tests' Python
# servers and curl for their curl client (internal/teststack).
APT_PACKAGES := $(BPF_CLANG) llvm-$(LLVM_VERSION) libbpf-dev bpftool iproute2 git \
	python3-uvicorn python3-starlette python3-fastapi curl
# express for the tests' Node server: internal/teststack/node's lock file,
# installed into $(NPM_DIR) (where the tests look for it).
NPM_DIR      := $(BUILD_DIR)/npm
TEST_NPM     := internal/teststack/node

# Everything the collector binary is built from: a change to any of these
# (including the embedded BPF objects) rebuilds it.
BUILD_INPUTS := $(shell find . \( -path ./$(BUILD_DIR) -o -path ./.git \) -prune -o \
	-type f \( -name '*.go' -o -name '*.o' -o -name go.mod -o -name go.sum \) -print) \
	builder-config.yaml

.PHONY: deps generate check-generated build run test validate lint bench fuzz clean

## deps: install what is missing (apt packages, tracefs/bpffs mounts, ocb); idempotent
deps: $(OCB)
	@missing=(); \
	for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$$p"); \
	done; \
	if (( $${#missing[@]} )); then \
		echo "deps: installing $${missing[*]}"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -q; \
		apt-get install -y -q "$${missing[@]}"; \
	fi
	@cmp -s $(TEST_NPM)/package-lock.json $(NPM_DIR)/package-lock.json && [[ -d $(NPM_DIR)/node_modules/express ]] || { \
		echo "deps: npm ci into $(NPM_DIR)"; mkdir -p $(NPM_DIR); \
		cp $(TEST_NPM)/package.json $(TEST_NPM)/package-lock.json $(NPM_DIR)/; \
		npm ci --prefix $(NPM_DIR) --no-audit --no-fund; }
	@mountpoint -q /sys/kernel/tracing || { echo "deps: mounting tracefs"; mount -t tracefs tracefs /sys/kernel/tracing; }
	@mountpoint -q /sys/fs/bpf || { echo "deps: mounting bpffs"; mount -t bpf bpf /sys/fs/bpf; }

# ocb, installed into _build/bin only when it is not there yet.
$(OCB):
	GOBIN=$(CURDIR)/$(BIN_DIR) go install go.opentelemetry.io/collector/cmd/builder@$(OCB_VERSION)

## generate: regenerate the bpf2go bindings/objects and the mdatagen code
# clang's BTF type order depends on the length of the checkout's absolute
# path (bpf2go hands clang absolute paths), so generation runs through a
# fixed path, a symlink to this checkout, held under a lock: the objects are
# the same bytes in every checkout.
GEN_PATH := /tmp/tokenwire-generate
generate: deps
	@exec 9>$(GEN_PATH).lock; flock 9; \
	ln -sfn $(CURDIR) $(GEN_PATH); \
	cd $(GEN_PATH) && go generate ./bpf/... ./receiver/... ./bench/...; rc=$$?; \
	rm -f $(GEN_PATH); exit $$rc

## check-generated: fail if `make generate` changes tracked files or adds files under bpf/, receiver/ or bench/
check-generated: generate
	@changed=$$(git status --porcelain --untracked-files=no); \
	added=$$(git status --porcelain --untracked-files=all -- bpf receiver bench | grep '^??' || true); \
	if [[ -n "$$changed$$added" ]]; then \
		echo "check-generated: FAILED: after 'make generate' the tree differs from the last commit."; \
		echo "Either generated code is stale (run 'make generate' and commit the result)"; \
		echo "or there are uncommitted changes/new files. Files that differ:"; \
		printf '%s\n' "$$changed" "$$added" | sed '/^$$/d; s/^/    /'; \
		git --no-pager diff --stat; \
		exit 1; \
	fi; \
	echo "check-generated: generated code is up to date"

## build: build the collector ./_build/tokenwire with ocb (only when its inputs changed)
build: $(COLLECTOR)

# GOFLAGS=-e: fileexporter's tests import otlpencodingextension, which the
# module proxy does not serve, so ocb's `go mod tidy` would fail on it; -e lets
# tidy go on (only `go mod tidy` reads it). The binary does not need that module.
$(COLLECTOR): $(BUILD_INPUTS) | $(OCB)
	@echo "build: building $@ with ocb $(OCB_VERSION) (a few minutes on 2 cores)"
	GOFLAGS="$$(go env GOFLAGS) -e" ./$(OCB) --config builder-config.yaml
	@touch $@

## run: run the collector with config.yaml (needs root)
run: deps build
	exec ./$(COLLECTOR) --config $(CONFIG)

## test: run every test with the real kernel (root); BPF tests fail instead of skipping
test: export TOKENWIRE_REQUIRE_BPF := 1
test: export TOKENWIRE_REQUIRE_STACKS := 1
test: deps
	go test -count=1 -p 1 -timeout 20m ./...

# The linters run from the tools module (internal/tools/go.mod pins them), over
# every module of the repository with the e2e tag so e2e/ is checked too.
STATICCHECK  := go tool -modfile=$(CURDIR)/internal/tools/go.mod staticcheck
LINT_MODULES := . deploy/kubernetes deploy/grafana

## lint: go vet and staticcheck over every module (root, deploy/kubernetes, deploy/grafana)
lint:
	@for m in $(LINT_MODULES); do \
		echo "lint: $$m"; \
		(cd $$m && go vet -tags e2e ./... && $(STATICCHECK) -tags e2e ./...); \
	done

## validate: check config.yaml (and examples/*.yaml) with the built collector
validate: build
	@for f in $(CONFIG) $(wildcard examples/*.yaml); do \
		echo "validate: $$f"; \
		./$(COLLECTOR) validate --config "$$f"; \
	done

## bench: BENCHMARKS.md from one run (root; about 75 min): kernel cost per chunk, Go and Python server overhead, record pipeline, XDP vs netfilter, memory, accuracy (bench/run.sh)
bench: deps
	$(MAKE) build
	@command -v nft >/dev/null && command -v iptables-legacy >/dev/null && command -v ipset >/dev/null || { \
		echo "bench: installing iptables nftables ipset"; export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -q; apt-get install -y -q iptables nftables ipset; }
	COLLECTOR=$(COLLECTOR) CONFIG=$(CONFIG) bash bench/run.sh

## fuzz: the XDP differential fuzz test (kernel program vs Go reference), the HTTP sniffer and the ClientHello reader, longer than make test
FUZZTIME ?= 5m
fuzz: export TOKENWIRE_REQUIRE_BPF := 1
fuzz: deps
	go test -run '^$$' -fuzz FuzzClassify -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./internal/xdp/
	go test -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) ./internal/httpsniff/
	go test -run '^$$' -fuzz FuzzServerName -fuzztime $(FUZZTIME) ./internal/tlshello/

## clean: remove the build output (collector, ocb, generated distribution)
clean:
	rm -rf $(BUILD_DIR)

# --- tokenwire in the user's stack (e2e/, examples/, deploy/) ---

# Debian's Prometheus, for the e2e test (the package's systemd service is
# not used: the test runs its own Prometheus on a free port).
E2E_APT_PACKAGES := prometheus

.PHONY: e2e reliability k8s-test grafana-test

## e2e: end-to-end test: the built collector with config.yaml, a real Prometheus, a second collector receiving spans over OTLP, the Grafana dashboard's queries and the alert rules (root; about a minute)
e2e: deps build k8s-test grafana-test
	@missing=(); \
	for p in $(E2E_APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$$p"); \
	done; \
	if (( $${#missing[@]} )); then \
		echo "e2e: installing $${missing[*]}"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -q; \
		apt-get install -y -q --no-install-recommends "$${missing[@]}"; \
	fi
	go test -tags e2e -count=1 -timeout 5m -v ./e2e/

## reliability: the fault tests (connection flood, record loss, address reuse, kill -9) with the built collector; writes docs/results/reliability.md and the README's table (root; under a minute)
reliability: deps build
	@mkdir -p docs/results
	TOKENWIRE_RESULTS=$(CURDIR)/docs/results/reliability.md TOKENWIRE_README=$(CURDIR)/README.md \
		go test -tags e2e -count=1 -timeout 5m -run '^TestReliability$$' -v ./e2e/

## k8s-test: decode deploy/kubernetes's manifests strictly into the Kubernetes API types and validate their collector configs (own Go module)
k8s-test: build
	cd deploy/kubernetes && TOKENWIRE_COLLECTOR=$(CURDIR)/$(COLLECTOR) TOKENWIRE_REQUIRE_COLLECTOR=1 go test -count=1 ./...

## grafana-test: decode deploy/grafana/tokenwire.json strictly against Grafana's dashboard schema (own Go module)
grafana-test:
	cd deploy/grafana && go test -count=1 ./...

# --- kernel matrix: the BPF suites on other kernels, under qemu (kernels/) ---

# qemu for the guests (TCG: /dev/kvm on these machines cannot run a guest),
# a static busybox for their initramfs, curl for the kernel packages. Only
# `make kernels` needs them.
KERNELS_APT_PACKAGES := qemu-system-x86 busybox-static curl
# Guests booted at a time: under TCG a guest keeps about 0.6 of a core busy
# (its tests mostly wait), so all three at once finish first on 2 cores.
KERNELS_JOBS ?= 3

.PHONY: kernels

## kernels: boot each kernel pinned in kernels/kernels.json under qemu and run the BPF suites there (the stream and handshake probes' hook-dependent tests once per hook type), and natively; writes kernels/results/matrix.{md,json}, docs/kernels.md and the README's kernel table, and fails if any cell fails (root; about 28-33 min on 2 cores, at most 46)
kernels: deps
	@missing=(); \
	for p in $(KERNELS_APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$$p"); \
	done; \
	if (( $${#missing[@]} )); then \
		echo "kernels: installing $${missing[*]}"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -q; \
		apt-get install -y -q --no-install-recommends "$${missing[@]}"; \
	fi
	go build -o $(BIN_DIR)/kernels ./kernels
	./$(BIN_DIR)/kernels -jobs $(KERNELS_JOBS) -docs docs/kernels.md -readme README.md
