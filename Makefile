# The README's two commands are `make run` and `make test`.
.PHONY: run test deps fuzz bench

deps:
	@Tools/ensure-system-packages.sh

## Runs the gateway with its embedded defaults (TCP 127.0.0.1:7400, ./switchboard.sock, ./switchboard.sqlite).
run: deps
	swift run -c release switchboard

## Runs the whole test suite: generated code up to date, the Python reference codec against the vectors, swift test
## (the cluster suites, which run PostgreSQL, Redis and several gateways each, the 10,000-session end test and the
## held-commit reads, which hold SQLite's write lock within its 5 s busy timeout, each run on their own after the
## others: on two cores their load, or the others', would otherwise stretch the timing checks).
## The suites whose checks hold a sub-second promise (a kick ends sessions within 1 s, a provider's leave answers at
## once, a slowloris is cut off after 1 s, a reconnect within the presence timeout): they run on their own, after the
## others, because 700 tests at once keep two cores saturated for most of a minute and starve their clocks.
## The metrics endpoint's /health draining window (about 2 s) and sbbench's 6 s heartbeat cut belong here too.
TIMED_SUITES = (SwitchboardServerTests\.(ClientServiceTests|ModerationTests|ProfileTests|MetricsEndpointLimitTests|MetricsEndpointTests|PresenceMembershipTests|HandshakeAndAuthTests)|SBBenchTests\.FanoutReaderTests)

## The suite that runs SwiftPM itself (it resolves and plans an app package that uses the client product, keeping
## both cores busy for up to a minute): on its own, so that it does not starve the timing checks beside it.
TOOLCHAIN_SUITES = SwitchboardClientTests\.ClientConsumerPackageTests

## Issue 31's and the webhooks' single-gateway suites with short deadlines or whole processes (item and set TTLs, last
## wills, broadcasts and their limits, event replay, webhooks across a kill -9, the in-process expiry bench): a step
## of their own after the timed suites, since beside the other 800 tests their deadlines ran out and the load they
## add stretched older timing checks (a slow consumer's GOAWAY, a WebSocket handshake timeout, a token renewal).
STATE_SUITES = (SwitchboardServerTests\.(ItemTTLTests|SetTTLTests|LastWillTests|BroadcastOptionsProcessTests|ChannelBroadcastTests|EventReplayTests)|SwitchboardHTTPAPITests\.(WebhookProcessTests|HTTPAPIBroadcastTests)|SBBenchTests\.ExpiryInProcessTests)

## The suites that run thousands of sessions against one gateway (10,000 sessions of one user ending at once; an admin
## change stream following 5,200 users through every kind of change): on their own, since that crowd beside the other
## suites would stretch their timing checks, and the others' load would stretch the crowd's past its deadlines. One
## after the other: each holds over 10,000 descriptors.
SCALE_SUITES = (SessionEndScalingTests|SwitchboardServerTests\.ChangeStreamTests)

## The cluster suites that load three nodes while PostgreSQL, Redis or a node fails: on their own after the other cluster
## suites, whose 80 tests beside them left their readers too little time to read (fewer than 100 reads in a restart).
FAULT_SUITES = SwitchboardClusterTests\.(ClusterOutageTests|ClusterHistoryTests)
## The cluster suites of issue 31's features (wills, broadcasts, item TTLs, event replay): a step of their own, so that
## the other cluster suites' deadline-bound PostgreSQL transactions do not share the database with them too.
STATE_CLUSTER_SUITES = SwitchboardClusterTests\.(ClusterWillTests|ClusterBroadcastTests|ClusterItemTTLTests|ClusterEventReplayTests)

test:
	@Tools/ensure-system-packages.sh redis-server postgresql tmux nodejs node-ws node-typescript chromium py:jwt=PyJWT py:cryptography=cryptography py:pytest=pytest
	python3 Tools/codegen/generate.py --check
	python3 Protocol/reference/sbwire.py --selftest
	swift test --skip SwitchboardClusterTests --skip '$(SCALE_SUITES)' --skip SwitchboardServerTests.ReadAfterCommitTests --skip '$(TIMED_SUITES)' --skip '$(TOOLCHAIN_SUITES)' --skip '$(STATE_SUITES)'
	swift test --skip-build --filter '$(TIMED_SUITES)'
	swift test --skip-build --filter '$(STATE_SUITES)'
	swift test --skip-build --filter '$(TOOLCHAIN_SUITES)'
	swift test --skip-build --filter SessionEndScalingTests
	swift test --skip-build --filter SwitchboardServerTests.ChangeStreamTests
	swift test --skip-build --filter SwitchboardServerTests.ReadAfterCommitTests
	swift test --skip-build --filter SwitchboardClusterTests --skip '$(FAULT_SUITES)' --skip '$(STATE_CLUSTER_SUITES)'
	swift test --skip-build --filter '$(STATE_CLUSTER_SUITES)'
	swift test --skip-build --filter '$(FAULT_SUITES)'
	SWITCHBOARD_BINARY=$(CURDIR)/.build/debug/switchboard python3 -m pytest -q -p no:cacheprovider clients/python/tests
	SWITCHBOARD_BINARY=$(CURDIR)/.build/debug/switchboard node --test --test-force-exit --test-timeout=120000 clients/javascript/test/
	Tools/api-fuzz.sh $(CURDIR)/.build/debug/switchboard 60

## A bounded libFuzzer run of the frame decoder, the request handlers and the token verifier (FUZZ_SECONDS in all,
## default 60).
fuzz: deps
	Tools/fuzz/run.sh $${FUZZ_SECONDS:-60} all

## The codec benchmark (release build).
bench: deps
	swift run -c release sbcodecbench
