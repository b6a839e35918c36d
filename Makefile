# The two commands of the README:
#   make wordcount   builds everything and runs the wordcount example on the embedded default
#   make test        runs the whole test suite
GO       ?= go
BIN      := bin/wstream
EXAMPLES := wordcount mapfilter window testops
WASM     := $(EXAMPLES:%=examples/wasm/build/%.wasm)

.PHONY: all setup build examples examples-all wordcount test test-faults test-matrix fuzz fuzz-short bench bench-state clean

all: build examples

setup:
	@bash scripts/setup.sh

build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/wstream

examples: $(WASM)

examples/wasm/build/%.wasm: FORCE
	@mkdir -p examples/wasm/build
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o $@ ./examples/wasm/go/$*

FORCE:

# Every guest language's wordcount, window and conformance modules, built with
# the builders the tests use, into examples/wasm/build/LANG/NAME.wasm.
examples-all: setup
	$(GO) run ./internal/testkit/buildexamples

wordcount: setup build examples
	./$(BIN) deploy examples/wasm/build/wordcount.wasm

# The timeout catches a hung test binary, not a slow machine: the tests
# package takes about 16 minutes on 2 idle cores, and twice that when
# other work shares them.
test: setup
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 45m ./...
	@$(MAKE) --no-print-directory fuzz-short

# The fault suite's long schedule (tests/faults; docs/cluster.md, "Fault
# suite"): at least 30 minutes and 200 faults. make test runs its short one.
test-faults:
	WSTREAM_FAULTS=long $(GO) test -count=1 -timeout 2h -v -run TestFaults ./tests/faults/

# Every fuzz target, as package.Target. go test takes one -fuzz target per
# run, so each gets a run of its own (fuzz-run-package.Target); plain go
# test runs their seed corpora (testdata/fuzz included) as tests.
FUZZ_TARGETS := \
	abi.FuzzDecode job.FuzzParse \
	checkpoint.FuzzReadMetadata checkpoint.FuzzVerifyMetadata checkpoint.FuzzOpenStored checkpoint.FuzzLocation \
	state.FuzzScanCanonical state.FuzzCanonicalRecords state.FuzzDecodeKey \
	connector.FuzzGenOffset connector.FuzzFileOffset connector.FuzzJetStreamOffset connector.FuzzRescaleOffsets \
	host.FuzzStateBatch host/instrument.FuzzInstrument host/instrument.FuzzInstrumentDifferential \
	host.FuzzHostFunctions
FUZZ_RUNS := $(addprefix fuzz-run-,$(FUZZ_TARGETS))
FUZZTIME  ?= 5m
# Runs at a time: two keep fuzz-short's 17 targets near 1.5 minutes.
FUZZJOBS  ?= 2

# fuzz runs every target for FUZZTIME; fuzz-short, which make test runs,
# for 3,000 inputs each. A failing input is saved in the package's
# testdata/fuzz. fuzz-short counts inputs rather than time: Go 1.26's fuzz
# coordinator can report a bare "context deadline exceeded" when a
# time-limited run ends while a starved worker is inside an input (Go
# issue 75804, fixed in Go 1.27), as FuzzHostFunctions did on a loaded CI
# machine; a count has no deadline to race.
fuzz: setup
	@$(MAKE) --no-print-directory -j$(FUZZJOBS) --output-sync=target $(FUZZ_RUNS)

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=3000x

.PHONY: $(FUZZ_RUNS)
$(FUZZ_RUNS): fuzz-run-%:
	$(GO) test -run '^$$' -fuzz '^$(subst .,,$(suffix $*))$$' -fuzztime $(FUZZTIME) ./$(basename $*)/

# The long forms of two randomized suites (make test runs short ones): the
# exact-count matrix (every checkpoint mode × parallelism 1–4 × the Go, C and
# Rust wordcounts × failures, workers, rescaling and local recovery, against
# counts the test computes itself) and 60 stops with a savepoint at random
# moments across every guest language.
test-matrix: setup
	WSTREAM_MATRIX=full $(GO) test -count=1 -timeout 60m -run 'TestExactCounts|TestStopWithSavepointRandom' ./tests/

# bench measures every performance target side by side and prints them
# against their bounds (internal/testkit/benchreport); the raw output stays in
# $(BENCHOUT). BENCHROUNDS rounds of every pipeline configuration; more
# rounds, steadier medians on a busy machine (single rounds of one ratio
# spread over ±0.15 here, and medians of 5 rounds still by ±0.05). The
# figures of BENCHMARKS.md come from these benchmarks.
BENCHOUT    ?= bench.out
BENCHROUNDS ?= 15
bench: setup
	@echo "make bench: a few minutes; raw output in $(BENCHOUT)"
	@$(GO) test -run '^$$' -bench '^BenchmarkRatios$$' -benchtime $(BENCHROUNDS)x -timeout 60m ./bench/ > $(BENCHOUT) || { cat $(BENCHOUT); exit 1; }
	@$(GO) test -run '^$$' -bench '^BenchmarkStart$$' -benchtime 3x -timeout 30m ./bench/ >> $(BENCHOUT) || { cat $(BENCHOUT); exit 1; }
	@$(GO) test -run '^$$' -bench '^BenchmarkMemoryPerInstance$$' -benchtime 1x -timeout 30m ./bench/ >> $(BENCHOUT) || { cat $(BENCHOUT); exit 1; }
	@$(GO) test -run '^$$' -bench '^BenchmarkPoisonRecords$$' -benchtime 6x -timeout 30m ./bench/ >> $(BENCHOUT) || { cat $(BENCHOUT); exit 1; }
	@$(GO) run ./internal/testkit/benchreport $(BENCHOUT)

# bench-state measures a keyed count at 10K and 1M distinct keys (and 10M
# with WSTREAM_STATE_10M=1: its fill alone takes many minutes), native and
# C, beside Pebble's own point reads and writes of the same keys
# (BenchmarkStateScale; WSTREAM_STATE_KEYS=a,b,… for other sizes), then
# checkpoints, restores and rescales of 20 MB and 2 GB of state beside cp,
# raw object-store gets and Pebble (BenchmarkLargeState).
bench-state:
	$(GO) test -run '^$$' -bench '^BenchmarkStateScale$$' -benchtime 1x -timeout 120m ./bench/
	WSTREAM_LARGE_STATE_MB=20,2000 WSTREAM_LARGE_STATE_ROUNDS=30 $(GO) test -run '^$$' -bench '^BenchmarkLargeState$$' -benchtime 1x -timeout 120m ./bench/

clean:
	rm -rf bin examples/wasm/build wstream-data $(BENCHOUT)
