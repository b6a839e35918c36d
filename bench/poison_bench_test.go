package bench

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/transport"
)

// poisonPlan is a keyed running count (testops' poison) of poisonRecords
// gen records over 10,000 keys, checkpointing every second, whose operator
// traps on the records of the words that poison's hash picks with every and
// salt.
// deadLetter adds "onGuestError": dead-letter mode, its dead letters in the
// default file sink, without a budget. withTime hashes each record's time
// too, which spreads the bad records over every key.
func poisonPlan(every uint64, salt, mode string, deadLetter, withTime bool) string {
	records := poisonRecords
	onError := ""
	if deadLetter {
		onError = `"onGuestError":{"policy":"dead-letter","maxDeadLetters":-1},`
	}
	return fmt.Sprintf(`{"name":"poison","parallelism":2,
 "checkpoint":{"interval":1000},%s
 "vertices":[
  {"id":"source","kind":"source","connector":"gen","config":{"count":%d,"keys":10000,"words":1,"seed":1},"parallelism":1},
  {"id":"count","kind":"operator","operator":"poison","config":{"every":%d,"salt":%q,"mode":%q,"withTime":%t}},
  {"id":"sink","kind":"sink","connector":"discard"}],
 "edges":[{"from":"source","to":"count","partition":"key"},{"from":"count","to":"sink"}]}`, onError, records, every, salt, mode, withTime)
}

// poisonWords counts the words w0…w9999 (gen's values with 10,000 keys and
// one word) that poison's hash picks with every and salt.
func poisonWords(every uint64, salt string) int {
	n := 0
	for k := range 10000 {
		h := uint64(14695981039346656037)
		for _, c := range []byte(salt + "w" + strconv.Itoa(k)) {
			h = (h ^ uint64(c)) * 1099511628211
		}
		if h%every == 0 {
			n++
		}
	}
	return n
}

// poisonRecords is how many records a poison run counts: 3M, 0.01% of them
// 300, so that a run's start weighs little against its records and its
// bad records.
const poisonRecords = 3_000_000

// BenchmarkPoisonRecords measures what dead-letter mode costs: the keyed
// count with no bad record and the default policy (fail), with no bad record
// in dead-letter mode (the undo journal of every call), and in dead-letter
// mode with 0.01% bad records, about 300 of the 3M spread over the whole
// input, each costing a rollback, the records before it in its call (or
// since the last commit point) run again and, when the operator traps rather
// than fails, a reset of the instance. poison-* picks the records of one
// word of 10,000 (one key: every bad record reaches the same subtask);
// spread-* picks records by a hash of their value and time, as random
// positions spread over every key and both subtasks, and compares with
// spread-clean, the same operator and hash over the same records, none of
// them bad (the hash of the time costs the count a few percent). Each timed
// run checks its dead-letter count. The configurations run side by side, one
// of each per round (runPaired), and the ratios are medians of per-round
// ratios. -benchtime Nx sets the rounds. WSTREAM_POISON_CASES=A,B,… runs
// only the configurations named, and the ratios between them.
func BenchmarkPoisonRecords(b *testing.B) {
	mod, err := testmod.BuildGo("examples/wasm/go/testops")
	if err != nil {
		b.Fatal(err)
	}
	// A salt for which exactly one word is bad, and one for which none is.
	bad, none := "", ""
	for i := 0; bad == "" || none == ""; i++ {
		s := "s" + strconv.Itoa(i)
		switch poisonWords(10000, s) {
		case 1:
			if bad == "" {
				bad = s
			}
		case 0:
			if none == "" {
				none = s
			}
		}
	}
	// Each run's dead letters: none for the clean runs, about 100 (0.01%)
	// for the others, without a restart.
	deadLetters := func(lo, hi int64) func(*testing.B, *transport.JobResult) {
		return func(b *testing.B, res *transport.JobResult) {
			var n int64
			for _, m := range res.Metrics {
				n += m.DeadLetters
			}
			if n < lo || n > hi || res.Restarts != 0 {
				b.Fatalf("%d dead letters and %d restarts, want %d to %d dead letters and no restart", n, res.Restarts, lo, hi)
			}
		}
	}
	clean, bad100 := deadLetters(0, 0), deadLetters(poisonRecords/20000, poisonRecords/5000)
	configs := []pairedRun{
		{name: "fail-policy-clean", run: jobRun{module: mod, plan: poisonPlan(10000, none, "trap", false, false), records: poisonRecords, check: clean}},
		{name: "dead-letter-clean", run: jobRun{module: mod, plan: poisonPlan(10000, none, "trap", true, false), records: poisonRecords, check: clean}},
		{name: "poison-trap", run: jobRun{module: mod, plan: poisonPlan(10000, bad, "trap", true, false), records: poisonRecords, check: bad100}},
		{name: "poison-fail", run: jobRun{module: mod, plan: poisonPlan(10000, bad, "fail", true, false), records: poisonRecords, check: bad100}},
		// The same hash as spread-*, over value and time, with a modulus
		// that picks no record: spread-*'s operator without a bad record.
		{name: "spread-clean", run: jobRun{module: mod, plan: poisonPlan(1<<62, "spread", "trap", true, true), records: poisonRecords, check: clean}},
		{name: "spread-trap", run: jobRun{module: mod, plan: poisonPlan(10000, "spread", "trap", true, true), records: poisonRecords, check: bad100}},
		{name: "spread-fail", run: jobRun{module: mod, plan: poisonPlan(10000, "spread", "fail", true, true), records: poisonRecords, check: bad100}},
	}
	ratios := []pairedRatio{
		{"poison-trap/clean", "poison-trap", "dead-letter-clean"},
		{"poison-fail/clean", "poison-fail", "dead-letter-clean"},
		{"spread-trap/clean", "spread-trap", "spread-clean"},
		{"spread-fail/clean", "spread-fail", "spread-clean"},
		{"spread-clean/clean", "spread-clean", "dead-letter-clean"},
		{"dead-letter/fail-policy", "dead-letter-clean", "fail-policy-clean"},
	}
	if only := os.Getenv("WSTREAM_POISON_CASES"); only != "" {
		configs, ratios = onlyCases(only, configs, ratios)
	}
	reportPaired(b, configs, ratios)
}
