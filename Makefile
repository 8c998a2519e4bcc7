# AskRelay — the two commands a newcomer needs:
#   make simulate   run the local multi-process simulation (the main job)
#   make test       install what is missing, build, run every test suite
SHELL := /bin/bash
, := ,
SWIFT ?= swift
# What building and running the simulation needs (make simulate, make release): nothing else is installed for it.
APT_PACKAGES := libzmq3-dev libsqlite3-dev pkg-config
# What only the tests add: docker-compose for `docker-compose config` (ComposeTests), python3-yaml and python3-venv
# for Tests/Deploy/validate-manifests.py, whose Kubernetes API models (PyPI's client) go into a virtual environment
# under .build, never into the system Python, with PyPI's opentelemetry-proto for Tests/Telemetry/otlp-receiver.py; prometheus (/usr/bin/prometheus and /usr/bin/promtool) for
# PrometheusTests (deploy/prometheus's rules and their unit tests, a real Prometheus scraping the processes).
TEST_APT_PACKAGES := docker-compose python3-yaml python3-venv gdb prometheus
PIP_PACKAGES := kubernetes==37.0.2 opentelemetry-proto==1.45.2
VENV := .build/venv
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 60

.PHONY: deps test-deps build release test test-only lint format simulate bench fuzz fuzz-smoke fuzz-build package-test clean help \
	report-screenshots power-test deploy-test deploy-clean api-docs bench-compare

help:
	@echo "make simulate   run the local simulation (builds what it needs)"
	@echo "make test       install missing packages, lint, build, run every test"
	@echo "make lint       swift format lint --strict (what make test checks first); make format fixes most findings"
	@echo "make deps       install what the build and make simulate need (libzmq3-dev, libsqlite3-dev) when missing"
	@echo "make test-deps  also what the tests need: docker-compose, python3-yaml, python3-venv, prometheus, and PyPI's"
	@echo "                kubernetes client and opentelemetry-proto into $(VENV)"
	@echo "make release    build release executables into .build/release"
	@echo "make bench      run the side-by-side benchmarks (wrapper vs C, codec, relay vs zmq_proxy)"
	@echo "make bench-compare BASE=<rev> [ROUNDS=5]  docs/performance.md's figures for BASE's release build and this"
	@echo "                checkout's, alternating in each round; medians and ratios (scripts/bench-compare.py)"
	@echo "make fuzz       fuzz the frame parser and message decoders for FUZZ_SECONDS (default 600)"
	@echo "make power-test  power cuts below SQLite: 200 of the strict broker, 300 under flows (100 in simulate),"
	@echo "                 100 batch, the record's and limits store's; lost messages per mode (about 17 minutes)"
	@echo "make package-test  play docs/testing.md's tutorial: an outside package depends on this checkout's products"
	@echo "make report-screenshots  short load runs, their load.html rendered by headless Chromium to PNG"
	@echo "make deploy-test  the compose deployment under a real Docker engine (kill -9, restart, SIGTERM drain), the"
	@echo "                  sharded one rebalanced 2 -> 3 -> 2 brokers under load, and deploy/kubernetes (with its"
	@echo "                  scale 2 -> 3 -> 2) under podman kube play; installs docker.io, debootstrap, podman (root)"
	@echo "make deploy-clean remove deploy-test's cache (.build/deploy-test: base image, engine image stores)"
	@echo "make api-docs   write docs/api.md, every public symbol of AskModel, AskClient, AskRelayCluster and"
	@echo "                AskRelayTesting from the built modules (APIReferenceTests fails when it is out of date)"

# Installs the Debian packages in $(1), only those missing.
define apt_install
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
endef

# What the build and the simulation need, only when missing.
deps:
	$(call apt_install,$(APT_PACKAGES))

# What the tests need besides: the Debian packages, and the PyPI packages in $(VENV) (made when missing).
test-deps: deps
	$(call apt_install,$(TEST_APT_PACKAGES))
	@$(VENV)/bin/python3 -c "import kubernetes.client, opentelemetry.proto" 2>/dev/null || { echo "installing into $(VENV): $(PIP_PACKAGES)"; \
	  python3 -m venv $(VENV) && $(VENV)/bin/python3 -m pip install -q --disable-pip-version-check $(PIP_PACKAGES); }

build: test-deps
	$(SWIFT) build --build-tests

release: deps
	$(SWIFT) build -c release

# The bound on the test run's wall time (about 17 minutes on 2 cores): past it, Tests/watchdog.sh prints every
# thread's backtrace and ends the run (docs/contributing.md, "When a test run hangs").
TEST_WATCHDOG ?= 2400

# Every test suite, then a bounded fuzzing run. Tests run one at a time: many start real processes and wait on
# sockets, and on a 2-core machine parallel tests starve each other's cooperative threads. The release build is
# what DocExamplesTests runs every documented example against (docs/contributing.md).
test: test-deps lint
	$(SWIFT) build -c release
	$(SWIFT) build --build-tests
	Tests/watchdog.sh $(TEST_WATCHDOG) $(SWIFT) test --skip-build --no-parallel
	$(MAKE) package-test
	$(MAKE) fuzz-smoke

# The tree is formatted by .swift-format; a finding fails make test (swift format ships with the toolchain).
lint:
	$(SWIFT) format lint --strict -r Sources Tests Package.swift

format:
	$(SWIFT) format -i -r Sources Tests Package.swift

# Power cuts below SQLite (docs/reliability.md, "Power loss"): POWER_CUTS per mode against the real broker under
# load, strict (drop and torn: 2 x POWER_CUTS) and batch (half as many per mode); under real flows 2 x POWER_CUTS
# (strictUnderFlows) plus POWER_CUTS power-cut faults in one askrelay simulate run (SimulationPowerCutTests); each
# prints the cuts run and the acknowledged messages lost (about 17 minutes on a shared 2-core machine); the filter
# also runs the AskCenter record's and the limits store's cuts (RecordPowerCutTests, LimitsPowerCutTests). make test
# runs the same tests with 6 cuts per mode.
POWER_CUTS ?= 100
power-test: deps
	$(SWIFT) build --build-tests
	ASKRELAY_POWER_CUTS=$(POWER_CUTS) $(SWIFT) test --skip-build --no-parallel --filter PowerCutTests 2>&1 | \
	  tee .build/power-test.log | grep -E "power cuts:|io faults:|✘|✔ Test run"; \
	  ! grep -q "✘" .build/power-test.log

# docs/testing.md's tutorial in a temporary folder: an outside package depends on this checkout by path, runs its
# own swift test and askrelay test; it writes nothing into the checkout (Tests/PackageCheck/package-test.sh).
package-test: test-deps
	$(SWIFT) build --build-tests
	SWIFT=$(SWIFT) Tests/PackageCheck/package-test.sh

test-only:
	$(SWIFT) test --skip-build --no-parallel

# libFuzzer build of the protocol fuzz target (Sources/askrelay-fuzz), in its own build folder.
fuzz-build: test-deps
	$(SWIFT) build -c release --product askrelay-fuzz --sanitize fuzzer -Xswiftc -DFUZZING --scratch-path .build/fuzz

# Fuzz from the checked-in seed corpus; new interesting inputs go to .build/fuzz-corpus, crashes to .build/fuzz-crashes.
fuzz: fuzz-build
	@mkdir -p .build/fuzz-corpus .build/fuzz-crashes
	.build/fuzz/release/askrelay-fuzz -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=.build/fuzz-crashes/ \
	  -print_final_stats=1 .build/fuzz-corpus Tests/Fuzz/corpus

fuzz-smoke:
	$(MAKE) fuzz FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS)

simulate: release
	.build/release/askrelay simulate $(ARGS)

bench: release
	.build/release/askrelay bench wrapper
	.build/release/askrelay bench codec
	.build/release/askrelay bench frames
	.build/release/askrelay bench link --inflight 1
	.build/release/askrelay bench link --inflight 100
	.build/release/askrelay load --mode relay --baseline proxy

# docs/performance.md's figures for BASE (a git revision, built into .build/bench-compare/) and this checkout's release
# build, alternating which goes first in each of ROUNDS rounds; prints every round, the medians and head/base ratios.
# Minutes per round: run it on a quiet machine (docs/performance.md, "Comparing two builds").
ROUNDS ?= 5
bench-compare:
	@test -n "$(BASE)" || { echo "make bench-compare: give BASE=<git revision> to compare this checkout with"; exit 64; }
	$(MAKE) release
	python3 scripts/bench-compare.py --base $(BASE) --rounds $(ROUNDS)

# load.html of three short runs (relay with its baseline, flows, a relay sweep) rendered by headless Chromium,
# installed when missing, into $(SCREENSHOTS)/<run>.png to look at; not part of make test.
SCREENSHOTS := .build/report-screenshots
report-screenshots: release
	@command -v chromium >/dev/null || { echo "installing: chromium"; $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium; }
	rm -rf $(SCREENSHOTS) && mkdir -p $(SCREENSHOTS)
	.build/release/askrelay load --mode relay --baseline proxy --duration 2s --report-dir $(SCREENSHOTS)/relay
	.build/release/askrelay load --mode flows --duration 2s --report-dir $(SCREENSHOTS)/flows
	.build/release/askrelay load --sweep --sweep-steps 3 --duration 1s --report-dir $(SCREENSHOTS)/sweep
	for run in relay flows sweep; do \
	  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1800 \
	    --screenshot=$(abspath $(SCREENSHOTS))/$$run.png file://$(abspath $(SCREENSHOTS))/$$run/load.html \
	    2>/dev/null && echo "$(SCREENSHOTS)/$$run.png"; \
	done

# The compose deployment and the Kubernetes manifests under real engines, from the host (Tests/Deploy/deploy-test.sh):
# its own dockerd and podman storage, everything it creates removed at the end; bounded by ASKRELAY_DEPLOY_TIMEOUT.
deploy-test: deps
	SWIFT=$(SWIFT) $(if $(SUDO),sudo --preserve-env=SWIFT$(,)ASKRELAY_DEPLOY_TIMEOUT$(,)ASKRELAY_DEPLOY_KEEP_LOGS) \
	  Tests/Deploy/deploy-test.sh

deploy-clean:
	$(SUDO) rm -rf .build/deploy-test

# docs/api.md from the public interface of the four library modules as built (debug): Tests/APIDocs/api-docs.py reads
# it with swift-symbolgraph-extract. APIReferenceTests (PackageLayoutTests) runs the same script in make test and
# fails, naming the symbols, when the page lacks one or lists one that is gone.
api-docs: deps
	$(SWIFT) build --target AskRelayTesting
	python3 Tests/APIDocs/api-docs.py

clean:
	rm -rf .build
