# Sluice — make help lists every target.
GO        ?= go
BIN       := $(CURDIR)/bin/sluice
PKGS      := ./...
export SLUICE_TEST_BINARY := $(BIN)

.PHONY: help build run test test-short lint lint-helm bench clean

help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/sluice and bin/sluice-hook (the program git runs as hooks)
	$(GO) build -o $(dir $(BIN)) ./cmd/sluice ./cmd/sluice-hook

run: build ## start a server: SQLite and repositories in ./data, http://127.0.0.1:7990
	$(BIN) serve

test: build ## every test (race detector on; starts its own PostgreSQL, nginx, haproxy where needed)
	$(GO) vet -tags bench ./internal/bench ./internal/pull ./internal/web
	$(GO) test -race -p 2 -timeout 40m $(PKGS)

test-short: build ## unit tests only
	$(GO) test -short -p 2 $(PKGS)

lint: ## gofmt, go vet, staticcheck, and lint-helm
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags bench $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 -tags bench $(PKGS)
	$(MAKE) lint-helm

lint-helm: ## helm lint + template of deploy/helm/sluice, haproxy -c (helm v3.22 built in tools/helm; not part of make test)
	cd tools/helm && $(GO) tool helm lint --strict ../../deploy/helm/sluice
	cd tools/helm && $(GO) tool helm template sluice ../../deploy/helm/sluice >/dev/null
	haproxy -c -f deploy/haproxy.cfg

bench: build ## benchmarks vs git http-backend behind nginx; writes docs/benchmarks.md
	$(GO) test -tags bench -run TestBench -count=1 -timeout 60m -v ./internal/bench

clean: ## remove build output
	rm -rf bin
