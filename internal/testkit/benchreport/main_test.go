package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestReport(t *testing.T) {
	out := `goos: linux
BenchmarkRatios-2   	       3	8169741822 ns/op	         0.50 checkpoints-1s/none	   3217837 checkpoints-none-records/s	         0.9503 keyed-c-deadline/nodeadline
BenchmarkRatios-2   	       3	8169741822 ns/op	         0.99 checkpoints-1s/none
BenchmarkRatios-2   	       3	8169741822 ns/op	         0.98 checkpoints-1s/none
BenchmarkOther/sub-case-8 	 1	 5 ns/op	 2.5 things
PASS
`
	got := map[[2]string][]float64{}
	if err := parse(strings.NewReader(out), got); err != nil {
		t.Fatal(err)
	}
	if v := got[[2]string{"BenchmarkRatios", "checkpoints-1s/none"}]; len(v) != 3 || v[1] != 0.99 {
		t.Fatalf("checkpoints-1s/none: %v", v)
	}
	if v := got[[2]string{"BenchmarkOther/sub-case", "things"}]; len(v) != 1 || v[0] != 2.5 {
		t.Fatalf("a sub-benchmark with dashes in its name: %v (all: %v)", v, got)
	}
	var w bytes.Buffer
	missing := report(&w, got)
	if missing != len(targets)-2 {
		t.Fatalf("%d targets not measured, want %d\n%s", missing, len(targets)-2, w.String())
	}
	s := w.String()
	// The median of 0.50, 0.99 and 0.98 is 0.98: holds against 0.97.
	if !strings.Contains(s, "1 s checkpoints / none                        ≥ 0.97      0.98  holds (median of 3 runs)") {
		t.Fatalf("checkpoint line:\n%s", s)
	}
	if !strings.Contains(s, "keyed count, C guest, deadline on / off                     ≥ 0.9      0.95  holds") {
		t.Fatalf("deadline line:\n%s", s)
	}
	if !strings.Contains(s, "not measured (BenchmarkRatios stateless-c/native)") {
		t.Fatalf("missing line:\n%s", s)
	}
}

func TestMissed(t *testing.T) {
	got := map[[2]string][]float64{{"BenchmarkRatios", "keyed-go/native"}: {0.2}}
	var w bytes.Buffer
	report(&w, got)
	if !strings.Contains(w.String(), "0.2  MISSED") {
		t.Fatalf("a ratio below its minimum:\n%s", w.String())
	}
}
