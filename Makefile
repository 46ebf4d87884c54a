# queen: the two commands of the README, and a few more.
#   make run    install what is missing, build, start a local server with queen, run the demo
#   make test   install what is missing, run every test
#   make stop   stop the server `make run` started
#   make bench  the benchmarks (bench/)
#   make gateway  queen-gateway (Queen MQ's HTTP API) on port 6632 over make run's server
#   make gateway-test  Queen MQ's Python client suite against queen-gateway (part of make test)
#   make examples  the Python, Node and Rust worker examples, checked (part of make test)
#   make exporter-test  postgres_exporter with examples/monitoring/queries.yaml (part of make test)
#   make package  a Debian package of the extension (target/package/*.deb); make package-test
#                 installs it with dpkg and uses it (last in make test)
#   make explore  the randomized interleaving explorer, fresh seeds (docs/development.md)
#   make explore-citus  the explorer through a Citus coordinator, with worker crashes and shard moves
#   make citus-test  queen on a local Citus cluster (part of make test; docs/scale-out.md)
#   make gateway-citus-test  make gateway-test's suites through the coordinator of a Citus
#                 cluster with queen distributed (part of make test)
SHELL := /bin/bash
PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
RUN_PORT ?= 28815
RUN_DB ?= queen

.PHONY: bench citus-test gateway-citus-test explore-citus examples explore exporter-test gateway package package-test run stop test unit-test integration-test gateway-test upgrade-test install install-debug bootstrap psql

bootstrap:
	@scripts/bootstrap

# Every target that installs the library unlinks it first: cargo pgrx overwrites it in place,
# and a server running with the old one loaded (preloaded, `make run`'s) then crashes with
# SIGSEGV as its code changes under it. Unlinked, the old file lives on for the processes that
# map it. (Expanded in the recipe, after bootstrap has installed pg_config.)
UNLINK_LIBRARY = rm -f "$$($(PG_CONFIG) --pkglibdir)/queen.so"

install: bootstrap
	$(UNLINK_LIBRARY)
	cargo pgrx install --release --pg-config $(PG_CONFIG)

# The debug build (without the pg_test functions) for the integration tests: quicker to build.
install-debug: bootstrap
	$(UNLINK_LIBRARY)
	cargo pgrx install --pg-config $(PG_CONFIG)

# scripts/run: start the server, create the demo database afresh, run the quickstart.
run: install
	@RUN_PORT=$(RUN_PORT) RUN_DB=$(RUN_DB) scripts/run

# queen-gateway in the foreground over make run's server, with bearer tokens (scripts/gateway).
GATEWAY_PORT ?= 6632
gateway:
	@RUN_PORT=$(RUN_PORT) RUN_DB=$(RUN_DB) GATEWAY_PORT=$(GATEWAY_PORT) scripts/gateway

stop:
	@scripts/cluster stop "$$(scripts/state-dir run-cluster)"

psql:
	@dir=$$(scripts/state-dir run-cluster); psql -h $$dir -p $(RUN_PORT) -U postgres $(RUN_DB)

test: unit-test integration-test citus-test gateway-test gateway-citus-test examples exporter-test upgrade-test package-test

# Plain Rust unit tests and #[pg_test]s, in a throwaway server that cargo-pgrx runs as postgres.
unit-test: bootstrap
	$(UNLINK_LIBRARY)
	cargo pgrx test pg15 --runas postgres --pgdata "$$(scripts/state-dir pgrx-test)/data"

# Real connections to a server of their own (scripts/integration-tests).
integration-test: install-debug
	scripts/integration-tests

# queen on Citus (tests/integration/tests/citus.rs) on a coordinator and two workers of its own
# (scripts/citus-tests); Citus is built from ../shared/citus when it is not installed, and the
# tests are skipped, with a line saying why, on a machine that has neither.
citus-test: install-debug
	scripts/citus-tests

# The HTTP gateway (gateway/): its unit tests, then Queen MQ's own Python client test suite
# (queen-mq 0.15.0 from PyPI) and tests/gateway's own tests against it (scripts/gateway-test).
gateway-test: install-debug
	cargo test -q -p queen-gateway
	scripts/gateway-test

# The same suites against the gateway, unchanged, in front of a Citus coordinator with queen
# distributed (skipped, with a line saying why, where Citus cannot be installed).
gateway-citus-test: install-debug
	QUEEN_GATEWAY_TEST_CITUS=1 scripts/gateway-test

# The worker examples (examples/python, node, rust), each against a server of its own, with
# the outcome checked: every order invoiced exactly once, retries, a clean SIGTERM.
examples: install-debug
	scripts/examples-test

# examples/monitoring/queries.yaml through Debian's prometheus-postgres-exporter, scraped and
# checked against a known state.
exporter-test: install-debug
	scripts/exporter-test

# The Debian package (release build): target/package/postgresql-15-queen_<version>-1_<arch>.deb.
package: bootstrap
	scripts/package

# The package installed with dpkg on a machine state without the build tree's files, used, and
# removed; then the build tree's debug build is installed again. Last in make test.
package-test: bootstrap
	scripts/package-test
	$(MAKE) --no-print-directory install-debug

# ALTER EXTENSION queen UPDATE from the previous release (its git tag, built here) to this
# tree, on a filled database (scripts/upgrade-test). It installs the old release for a while,
# then this tree again (make test runs it before package-test, which does the same).
upgrade-test: bootstrap
	scripts/upgrade-test

# The randomized interleaving explorer (tests/integration/src/explore): fresh seeds for
# QUEEN_EXPLORE_MINUTES (default 10), with crash rounds, on a cluster of its own;
# QUEEN_EXPLORE_SEED=n or QUEEN_EXPLORE_SCHEDULE=file replays a failure.
explore: install-debug
	scripts/integration-tests --test explore -- --ignored --exact explore --nocapture

# The same through the coordinator of a Citus cluster of its own (docs/scale-out.md), with crash
# rounds that stop a worker and rounds that move a shard.
explore-citus: install-debug
	rc=0; scripts/citus-ensure || rc=$$?; if [ $$rc -eq 3 ]; then exit 0; fi; [ $$rc -eq 0 ]
	scripts/integration-tests --test explore -- --ignored --exact explore_citus --nocapture

# Benchmarks against raw SQL and PgQ on the same server (release build). BENCH=... selects
# scenarios (scripts/bench lists them), e.g. make bench BENCH=clients.
bench: install
	scripts/bench $(BENCH)
