// Command benchreport reads the output of go test -bench (files named on the
// command line, or standard input) and prints the performance targets of
// wstream against what was measured: each target's metric, its bound, the
// median of the values reported for it and whether it holds. make bench
// runs the benchmarks and then this, so that one command reproduces every
// ratio of BENCHMARKS.md on the user's machine.
//
// A metric is a unit that a benchmark reports with b.ReportMetric; the
// targets name the benchmark and the unit. It exits 1 when a target was not
// measured at all (a benchmark renamed or not run), not when one is missed:
// a missed target is a finding, not a broken run.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// target is one performance target.
type target struct {
	bench, unit string // metric: the benchmark (without -GOMAXPROCS) and the unit
	atLeast     bool   // the bound is a minimum (else a maximum)
	bound       float64
	what        string
}

var targets = []target{
	{"BenchmarkRatios", "stateless-c/native", true, 0.8, "stateless pipeline, C guest with deadline / native"},
	{"BenchmarkRatios", "stateless-go/native", true, 0.3, "stateless pipeline, Go guest with deadline / native"},
	{"BenchmarkRatios", "keyed-c/native", true, 0.8, "keyed count, C guest with deadline / native"},
	{"BenchmarkRatios", "keyed-go/native", true, 0.4, "keyed count, Go guest with deadline / native"},
	{"BenchmarkRatios", "stateless-c-deadline/nodeadline", true, 0.9, "stateless, C guest, deadline on / off"},
	{"BenchmarkRatios", "stateless-go-deadline/nodeadline", true, 0.9, "stateless, Go guest, deadline on / off"},
	{"BenchmarkRatios", "keyed-c-deadline/nodeadline", true, 0.9, "keyed count, C guest, deadline on / off"},
	{"BenchmarkRatios", "keyed-go-deadline/nodeadline", true, 0.9, "keyed count, Go guest, deadline on / off"},
	{"BenchmarkRatios", "checkpoints-1s/none", true, 0.97, "keyed count, 1 s checkpoints / none"},
	{"BenchmarkPoisonRecords", "poison-trap/clean", true, 0.95, "0.01% poison records (trap) / none, Go guest, one key"},
	{"BenchmarkPoisonRecords", "spread-trap/clean", true, 0.95, "0.01% poison records (trap) / none, Go guest, every key"},
	{"BenchmarkStart/go", "warm-job-ms", false, 100, "warm deploy to first record, Go wordcount (ms)"},
	{"BenchmarkStart/go", "warm/cold", false, 0.05, "warm / cold start, Go wordcount"},
	{"BenchmarkStart/c", "warm/cold", false, 0.05, "warm / cold start, C wordcount"},
	{"BenchmarkMemoryPerInstance/c", "MiB/instance", false, 1.5, "RSS per added instance, C (MiB)"},
	{"BenchmarkMemoryPerInstance/rust", "MiB/instance", false, 1.5, "RSS per added instance, Rust (MiB)"},
	{"BenchmarkMemoryPerInstance/wat", "MiB/instance", false, 1.5, "RSS per added instance, WAT (MiB)"},
	{"BenchmarkMemoryPerInstance/go", "MiB/instance", false, 4, "RSS per added instance, Go (MiB)"},
}

// line matches a benchmark result: name, iterations, then value-unit pairs.
var line = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parse collects every reported value by benchmark and unit.
func parse(r io.Reader, into map[[2]string][]float64) error {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		m := line.FindStringSubmatch(strings.TrimSpace(s.Text()))
		if m == nil {
			continue
		}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			k := [2]string{m[1], f[i+1]}
			into[k] = append(into[k], v)
		}
	}
	return s.Err()
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// report writes the table of targets and returns how many were not
// measured.
func report(w io.Writer, got map[[2]string][]float64) int {
	missing := 0
	fmt.Fprintf(w, "%-55s %9s %9s  %s\n", "target", "bound", "measured", "")
	for _, t := range targets {
		bound := fmt.Sprintf("≤ %g", t.bound)
		if t.atLeast {
			bound = fmt.Sprintf("≥ %g", t.bound)
		}
		v, ok := got[[2]string{t.bench, t.unit}]
		if !ok {
			missing++
			fmt.Fprintf(w, "%-55s %9s %9s  not measured (%s %s)\n", t.what, bound, "-", t.bench, t.unit)
			continue
		}
		m := median(v)
		verdict := "holds"
		if (t.atLeast && m < t.bound) || (!t.atLeast && m > t.bound) {
			verdict = "MISSED"
		}
		runs := ""
		if len(v) > 1 {
			runs = fmt.Sprintf(" (median of %d runs)", len(v))
		}
		fmt.Fprintf(w, "%-55s %9s %9.3g  %s%s\n", t.what, bound, m, verdict, runs)
	}
	return missing
}

func main() {
	got := map[[2]string][]float64{}
	if len(os.Args) < 2 {
		if err := parse(os.Stdin, got); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport:", err)
			os.Exit(2)
		}
	}
	for _, name := range os.Args[1:] {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchreport:", err)
			os.Exit(2)
		}
		err = parse(f, got)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchreport: reading %s: %v\n", name, err)
			os.Exit(2)
		}
	}
	if missing := report(os.Stdout, got); missing > 0 {
		fmt.Fprintf(os.Stderr, "benchreport: %d targets were not measured: did every benchmark run?\n", missing)
		os.Exit(1)
	}
}
