# eosflow — the two commands a fresh machine needs: `make demo` and `make test`.
# Both bring the local stack up first (dev/stack: Apache Kafka, PostgreSQL, Apicurio Registry).
# Downloads and the cargo target dir are cached outside the clone, under ~/.cache/eosflow.

SHELL := /bin/bash
export CARGO_TARGET_DIR ?= $(HOME)/.cache/eosflow/target
CARGO ?= cargo
EOSFLOW := $(CARGO_TARGET_DIR)/debug/eosflow
STACK_ENV = eval "$$(dev/stack env)"

.PHONY: demo test deps stack-up stack-down lint build verify verify-long check-compose bench

## Install the system packages the build and the stack need (Debian; skipped when present).
deps:
	@dev/deps

stack-up: deps
	@dev/stack up >/dev/null

stack-down:
	@dev/stack down

build: deps
	$(CARGO) build --locked --all-targets

## The main job end to end: topics, a produce → process → consume pipeline, a summary.
demo: stack-up build
	@$(STACK_ENV) && $(EOSFLOW) topics apply --dir topics
	@$(STACK_ENV) && $(EOSFLOW) demo

## Every test against the real broker, database and registry, plus lint and compose checks.
test: stack-up
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings
	dev/check-compose
	dev/check-k8s
	@$(STACK_ENV) && $(CARGO) build --locked --all-targets --quiet && $(EOSFLOW) schemas check --dir schemas
	@$(STACK_ENV) && $(CARGO) test --locked --all-targets -- --test-threads=2

## The full exactly-once proof (200k records, 8 partitions, 2 instances, ≥ 10 kill -9).
verify-long: stack-up build
	@$(STACK_ENV) && $(EOSFLOW) verify --records 200000 --partitions 8 --instances 2 --kills 12 --duration-secs 60

check-compose:
	dev/check-compose

## Benchmarks (≈ 40 min, not part of test): raw pipe, eosflow at-least-once/exactly-once and
## Kafka Streams in one run, sweeps, recovery, micro-benchmarks → target/bench/report.md + SVGs.
bench: stack-up
	benches/run
