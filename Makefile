# loaderx: build, demo, tests and benchmarks.
#   make demo   set everything up, convert a built-in sample dataset, stream batches
#   make test   set everything up and run every test (Go and Python)
PYTHON ?= python3
GO ?= go
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck
LIB := loaderx/lib/libloaderx.so
GO_SOURCES := $(shell find capi zrecord zsampler -name '*.go' -not -name '*_test.go' 2>/dev/null)

.PHONY: all build setup demo test test-go test-race test-py check bench bench-deps clean

all: build

$(LIB): $(GO_SOURCES) go.mod go.sum
	$(PYTHON) python/build_native.py

## build: compile the Go core into loaderx/lib/
build: $(LIB)

## setup: Go modules, the Python package in editable mode (builds the library) and test deps
setup:
	$(GO) mod download
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[test]'

## demo: the main job: convert a sample dataset, stream batches, print throughput
demo: setup
	$(PYTHON) scripts/demo.py

## test: every test, Go then Python
test: setup check test-go test-race test-py

## check: gofmt, go vet, staticcheck and ruff (make setup installs both linters)
check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	$(PYTHON) -m ruff check

test-go:
	$(GO) test -count=1 ./...

test-race:
	$(GO) test -count=1 -race -short ./zrecord/... ./zsampler/...

test-py: $(LIB)
	$(PYTHON) -m pytest -q tests

## bench: install the contenders and run the three-layer benchmark
bench-deps:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[bench]'

bench: bench-deps build
	@echo "The original Zig loaderx (loaderx==1.5.2) is measured when it is installed in a directory of its own:"
	@echo "  make bench BENCH_ARGS=--install-original     (pip install --target ~/.cache/loaderx-bench/orig-1.5.2)"
	@echo "  make bench BENCH_ARGS='--original DIR'        (or LOADERX_BENCH_ORIG=DIR: an existing --target install)"
	@echo "A small run: make bench BENCH_ARGS=--quick"
	$(PYTHON) scripts/bench all $(BENCH_ARGS)

clean:
	rm -rf build dist *.egg-info loaderx/lib/*.so loaderx/lib/*.h
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
