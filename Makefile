# eosflow — the two commands a fresh machine needs: `make demo` and `make test`.
# Both bring the local stack up first (dev/stack: Apache Kafka, PostgreSQL, Apicurio Registry).
# Downloads and the cargo target dir are cached outside the clone, under ~/.cache/eosflow.

SHELL := /bin/bash
export CARGO_TARGET_DIR ?= $(HOME)/.cache/eosflow/target
CARGO ?= cargo
EOSFLOW := $(CARGO_TARGET_DIR)/debug/eosflow
MDBOOK_VERSION := 0.5.4
MDBOOK := $(HOME)/.cache/eosflow/tools/mdbook-$(MDBOOK_VERSION)/bin/mdbook
STACK_ENV = eval "$$(dev/stack env)"
# Test binaries run side by side in `make test` (dev/test-lanes).
TEST_LANES ?= 3
# The workspace's rustdoc, warnings denied (lint checks it, docs puts it beside the book).
RUSTDOC = RUSTDOCFLAGS="-D warnings" $(CARGO) doc --locked --workspace --no-deps --lib --examples

.PHONY: demo demo-chaos query-demo test deps stack-up stack-down lint docs build verify verify-long verify-scenario check-compose check-rules config-reference bench

## Install the system packages the build and the stack need (Debian; skipped when present).
deps:
	@dev/deps

stack-up: deps
	@dev/stack up >/dev/null

stack-down:
	@dev/stack down

## The workspace (docs/layout.md) is always built whole, with every target: a smaller selection
## resolves dependency features differently and rebuilds RocksDB's C++.
build: deps
	$(CARGO) build --locked --workspace --all-targets

## The main job end to end: the orders application (order service → Postgres outbox → Kafka →
## order aggregate + fulfilment saga, stock, payment, customer read model) for ~60 s, a live
## progress line, a summary and its checks (exit 0 only if they hold). Logs: RUST_LOG.
demo: stack-up build
	@$(STACK_ENV) && $(EOSFLOW) topics apply --dir topics
	@$(STACK_ENV) && RUST_LOG="$${RUST_LOG:-error}" $(EOSFLOW) demo

## The demo with hostile dependencies: many declines, failed shipments and failed compensations.
demo-chaos: stack-up build
	@$(STACK_ENV) && RUST_LOG="$${RUST_LOG:-off}" $(EOSFLOW) demo --duration-secs 30 \
		--stock-failure-rate 0.3 --payment-failure-rate 0.4 --ship-failure-rate 0.5 \
		--release-failure-rate 0.5 --poison-rate 0.2 --cancel-rate 0.2

## Interactive queries end to end (docs/interactive-queries.md): the word count started with
## eosflow::start, asked for a word's count over HTTP on its operations port, then stopped.
query-demo: stack-up build
	@$(STACK_ENV) && RUST_LOG="$${RUST_LOG:-warn}" timeout 300 $(CARGO_TARGET_DIR)/debug/examples/word_count_queries

## Every test against the real broker, database and registry, plus lint, docs and compose checks.
test: stack-up lint
	$(MAKE) --no-print-directory docs
	dev/check-compose
	dev/check-k8s
	$(MAKE) --no-print-directory check-rules
	@$(STACK_ENV) && $(CARGO) build --locked --workspace --all-targets --quiet && $(EOSFLOW) schemas check --dir schemas
	@$(STACK_ENV) && RUST_LOG=error timeout 300 $(CARGO_TARGET_DIR)/debug/examples/word_count_queries >/dev/null
	@# Every test binary, three side by side (dev/test-lanes: most of them wait on the broker),
	@# two tests at a time within each via the environment: criterion's bench harness
	@# (benches/hot_path.rs, run once as a smoke test) rejects libtest's --test-threads argument.
	@# `--all-targets` leaves out doctests: the public API's examples run as one more job.
	@$(STACK_ENV) && RUST_TEST_THREADS=2 dev/test-lanes --lanes $(TEST_LANES) \
		--job 'doctests=$(CARGO) test --locked --workspace --doc' \
		-- --locked --workspace --all-targets

## Formatting, clippy over every crate and target, rustdoc without warnings, and the docs' links
## (dev/check-links). `--examples` keeps dev-dependencies in the feature resolution (as
## `--all-targets` does): without it, `cargo doc` resolves other features and rebuilds RocksDB's C++.
lint:
	dev/check-links
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	$(RUSTDOC)

## The fault-injection suite, long versions (docs/verification.md): kill-processors
## (1M records, 50 kill -9), broker-restart and outbox-crash (private broker/Postgres), zombie,
## poison, …, and the three-broker cluster scenarios (leader-bounce, coordinator-bounce,
## broker-pause-one, isr-shrink, outbox-leader-bounce on a private dev/cluster). One closing line per scenario; exit 2 on any
## violation. About an hour on 2 cores.
verify-long: stack-up build
	@$(STACK_ENV) && $(EOSFLOW) verify --scenario all --work-dir target/verify-long

## One long scenario: make verify-scenario SCENARIO=zombie (add SHORT=1 for the make-test size).
verify-scenario: stack-up build
	@$(STACK_ENV) && $(EOSFLOW) verify --scenario $(SCENARIO) $(if $(SHORT),--short) --work-dir target/verify-long

check-compose:
	dev/check-compose

## The docs (docs/, an mdBook: docs/book.toml, docs/SUMMARY.md) built into target/book/, then
## every link, anchor and image checked by dev/check-links, after its self-test (a checker that
## stopped finding problems fails). mdBook is built once from crates.io into ~/.cache/eosflow/tools
## (about 7 min on two busy cores), skipped when present.
## The book (target/book/) with the public API's rustdoc beside it as api/ (the same `cargo doc`
## as `lint`, so after it this costs nothing), and its links checked, those into api/ too.
docs: $(MDBOOK)
	dev/check-links --self-test
	$(RUSTDOC)
	$(MDBOOK) build docs
	rm -rf target/book/api && cp -r $(CARGO_TARGET_DIR)/doc target/book/api
	EOSFLOW_RUSTDOC_DIR=$(CARGO_TARGET_DIR)/doc dev/check-links

$(MDBOOK):
	CARGO_TARGET_DIR=$(HOME)/.cache/eosflow/target-tools $(CARGO) install mdbook --locked \
		--no-default-features --version $(MDBOOK_VERSION) --root $(HOME)/.cache/eosflow/tools/mdbook-$(MDBOOK_VERSION)

## The alert rules (ops/prometheus/rules.yml) parse and pass their unit tests (rules.test.yml).
## dev/promtool builds a pinned promtool once from the Go module proxy. The metric names the
## rules and the Grafana dashboard query are checked against the code by tests/ops_pack.rs.
check-rules:
	dev/promtool check rules ops/prometheus/rules.yml
	cd ops/prometheus && ../../dev/promtool test rules rules.test.yml

## Regenerates docs/reference/configuration.md from the config types' doc comments (the
## config_reference test, which `make test` runs to check the file, writes it with BLESS=1).
config-reference:
	@bin=$$($(CARGO) test --locked --workspace --all-targets --no-run 2>&1 \
		| grep -oE '\(/[^)]*/config_reference-[^)]*\)' | tr -d '()') \
		&& BLESS=1 "$$bin" --quiet && echo "wrote docs/reference/configuration.md"

## Benchmarks (≈ 70 min, not part of test): raw pipe, eosflow at-least-once/exactly-once and
## Kafka Streams (three configurations) in one run, sweeps, recovery, restore, failover,
## micro-benchmarks, outbox → target/bench/report.md + SVGs, copied to benches/results/.
bench: stack-up
	benches/run
