# AskRelay — the two commands a newcomer needs:
#   make simulate   run the local multi-process simulation (the main job)
#   make test       install what is missing, build, run every test suite
SHELL := /bin/bash
SWIFT ?= swift
APT_PACKAGES := libzmq3-dev libsqlite3-dev docker-compose pkg-config
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps build release test simulate bench clean help

help:
	@echo "make simulate   run the local simulation (builds what it needs)"
	@echo "make test       install missing packages, build, run every test"
	@echo "make deps       install libzmq3-dev, libsqlite3-dev, docker-compose when missing"
	@echo "make release    build release executables into .build/release"
	@echo "make bench      run the side-by-side benchmarks (wrapper vs C)"

# Installs the Debian packages the build and tests need, only when one is missing.
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

build: deps
	$(SWIFT) build --build-tests

release: deps
	$(SWIFT) build -c release

test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

simulate: release
	@if .build/release/askrelay simulate --help >/dev/null 2>&1; then \
	  .build/release/askrelay simulate $(ARGS); \
	else \
	  echo "askrelay simulate is not built yet (see issue: local multi-process simulation)" >&2; exit 1; \
	fi

bench: release
	.build/release/askrelay bench wrapper

clean:
	rm -rf .build
