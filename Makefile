# StackSaga for Go. `make test` is the whole suite against real Kafka and
# Cassandra; `make help` lists the targets.

GO           ?= go
PKGS         ?= ./...
TEST_TIMEOUT ?= 50m
TEST_FLAGS   ?=
TEST_FUZZTIME ?= 3s
# CLUSTER=1: make test also starts the three-node cluster (scripts/services up
# --cluster, about 3-4 minutes on a loaded 2-core box; see test below);
# CLUSTER=0 does not, and the cluster tests skip.
CLUSTER      ?= 1
FUZZTIME     ?= 1m
STATICCHECK  ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
SERVICES     := scripts/services

.PHONY: help setup test fuzz test-short lint demo services-up services-down services-wipe services-status services-logs services-cluster-up services-cluster-down

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

# test: first runs scripts/setup, which installs from Debian's packages whatever
# the suite needs and the machine lacks (JDK 17 + Maven for the local servers,
# PostgreSQL's server for the local PostgreSQL,
# Chromium for the Trace Window's browser test), or stops at once naming the
# command that installs it. Then it uses KAFKA_BROKERS and CASSANDRA_HOSTS when
# both are set (e.g. docker compose); otherwise starts the local servers with
# scripts/services (a no-op when they already run) and exports their endpoints,
# the TLS ones included.
# When it starts the local servers and CLUSTER=1 (the default), it also
# starts the three-node cluster (see docs/clusters.md) unless
# CASSANDRA_CLUSTER_HOSTS is set, exports its endpoints and sets
# STACKSAGA_REQUIRE_CLUSTER=1, so that the cluster tests fail rather than
# skip. With endpoints of its own (docker compose), the cluster tests run
# when the CASSANDRA_CLUSTER_HOSTS/KAFKA_CLUSTER_BROKERS variables are set.
# After the tests it runs every fuzz target for TEST_FUZZTIME each (0: none).
# STACKSAGA_REQUIRE_SERVICES=1 turns any test that would skip for lack of a
# service into a failure: with endpoints of servers that have no TLS listeners
# (docker compose), add TEST_FLAGS='-skip OverTLS'.
test: ## install what is missing, start services if needed, then go test -race over the whole module
	@set -e; \
	if [ -n "$$KAFKA_BROKERS" ] && [ -n "$$CASSANDRA_HOSTS" ]; then \
		scripts/setup --no-services; \
		echo "make test: using KAFKA_BROKERS=$$KAFKA_BROKERS CASSANDRA_HOSTS=$$CASSANDRA_HOSTS POSTGRES_DSN=$${POSTGRES_DSN:-}"; \
		if [ -z "$$POSTGRES_DSN" ]; then \
			echo "make test: note: POSTGRES_DSN is not set: the sqlbarrier tests will fail (docker compose: export the DSN its header gives)"; \
		fi; \
		if [ -z "$$CASSANDRA_TLS_HOSTS" ] || [ -z "$$KAFKA_SASL_SSL_BROKERS" ]; then \
			echo "make test: note: no TLS endpoints (CASSANDRA_TLS_HOSTS, KAFKA_SASL_SSL_BROKERS): the OverTLS tests will fail;" \
				"for servers without TLS listeners (docker compose) add TEST_FLAGS='-skip OverTLS'"; \
		fi; \
	else \
		scripts/setup; \
		$(SERVICES) up >/dev/null; \
		eval "$$($(SERVICES) env)"; \
		if [ "$(CLUSTER)" = 1 ] && [ -z "$$CASSANDRA_CLUSTER_HOSTS" ]; then \
			$(SERVICES) up --cluster >/dev/null; \
			eval "$$($(SERVICES) env --cluster)"; \
			export KAFKA_CLUSTER_BROKERS CASSANDRA_CLUSTER_HOSTS CASSANDRA_CLUSTER_DC STACKSAGA_CLUSTER_DIR STACKSAGA_REQUIRE_CLUSTER=1; \
		fi; \
	fi; \
	export KAFKA_BROKERS CASSANDRA_HOSTS POSTGRES_DSN STACKSAGA_REQUIRE_SERVICES=1; \
	echo "make test: go test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $(PKGS)  (KAFKA_BROKERS=$$KAFKA_BROKERS CASSANDRA_HOSTS=$$CASSANDRA_HOSTS POSTGRES_DSN=$${POSTGRES_DSN:-}" \
		"KAFKA_SASL_SSL_BROKERS=$${KAFKA_SASL_SSL_BROKERS:-} CASSANDRA_TLS_HOSTS=$${CASSANDRA_TLS_HOSTS:-}" \
		"CASSANDRA_CLUSTER_HOSTS=$${CASSANDRA_CLUSTER_HOSTS:-} KAFKA_CLUSTER_BROKERS=$${KAFKA_CLUSTER_BROKERS:-})"; \
	start=$$(date +%s); mkdir -p .cache; log=.cache/test.log; \
	{ trc=0; $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $(PKGS) || trc=$$?; echo $$trc >.cache/test.rc; } 2>&1 | tee $$log; \
	rc=$$(cat .cache/test.rc); \
	echo "make test: PHASE tests: $$(( $$(date +%s) - start ))s (exit $$rc)"; \
	if [ "$(TEST_FUZZTIME)" != 0 ]; then \
		start=$$(date +%s); frc=0; \
		GO=$(GO) scripts/fuzz $(TEST_FUZZTIME) || frc=$$?; \
		echo "make test: PHASE fuzz: $$(( $$(date +%s) - start ))s (exit $$frc)"; \
		[ $$rc -ne 0 ] || rc=$$frc; \
	fi; \
	if [ $$rc -ne 0 ] && [ -s $$log ]; then \
		echo "make test: FAILURES (the whole output is in $$log):"; \
		grep -E -e '^--- FAIL|^FAIL|^panic:|DATA RACE|^    +[A-Za-z0-9_]+\.go:[0-9]+: ' $$log | head -n 300; \
	fi; \
	exit $$rc

setup: ## install from Debian's packages what make test needs and the machine lacks
	scripts/setup

fuzz: ## run every fuzz target for FUZZTIME each (default 1m; FUZZ=regexp picks targets)
	GO=$(GO) scripts/fuzz $(FUZZTIME) $(or $(FUZZ),.)

test-short: ## unit tests only: no services, no -race (skips what needs Kafka/Cassandra)
	$(GO) test -count=1 -short $(PKGS)

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*')); \
	if [ -n "$$out" ]; then echo "gofmt -l reports:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

demo: ## run the end-to-end demo (embedded broker and store unless endpoints are set)
	$(GO) run ./cmd/sagademo

services-up: ## start Kafka (127.0.0.1:9092), Cassandra (127.0.0.1:9042) and PostgreSQL (127.0.0.1:55432); idempotent
	$(SERVICES) up

services-down: ## stop the servers this repo started (data kept; WIPE=1 deletes it)
	$(SERVICES) down $(if $(filter 1,$(WIPE)),--wipe)

services-wipe: ## stop the servers and delete their data and logs
	$(SERVICES) down --wipe

services-cluster-up: ## start the three-node Cassandra and Kafka cluster on 127.0.0.1-3 (docs/clusters.md); idempotent
	$(SERVICES) up --cluster

services-cluster-down: ## stop the cluster (data kept; WIPE=1 deletes it)
	$(SERVICES) down --cluster $(if $(filter 1,$(WIPE)),--wipe)

services-status: ## what runs: pids, ports, RSS
	$(SERVICES) status

services-logs: ## tail the servers' logs
	$(SERVICES) logs
