package tests

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// TestTemplateCountsManyKeys deploys the starter project of every language
// (wstream init, wstream build) with default limits, on one subtask, over
// a file of more distinct words than the old bound of 200,000 pending
// timers per subtask: the templates keep one end-of-input timer per word,
// so that subtask holds one timer per word, and every count must come out
// exact. WSTREAM_TEMPLATE_SCALE_KEYS sets the number of distinct words
// (default 250,000; the acceptance run of issue 36 is 5,000,000).
func TestTemplateCountsManyKeys(t *testing.T) {
	keys := 250_000
	if s := os.Getenv("WSTREAM_TEMPLATE_SCALE_KEYS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("WSTREAM_TEMPLATE_SCALE_KEYS=%q: want a positive number of words", s)
		}
		keys = n
	}
	wstreamBin(t)
	in := filepath.Join(t.TempDir(), "words.txt")
	writeScaleWords(t, in, keys)
	for _, lang := range []string{"go", "rust", "c", "assemblyscript", "wat"} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			name := "many-" + lang
			proj := filepath.Join(dir, name)
			if r := runCLI(t, dir, "init", "--lang", lang, name); r.code != 0 {
				t.Fatalf("init: exit %d\n%s", r.code, r.stderr)
			}
			if lang == "assemblyscript" {
				nm := filepath.Join(testmod.Root(), filepath.FromSlash(testmod.ASSDKDir), "node_modules")
				if _, err := os.Stat(nm); err != nil {
					t.Skipf("the AssemblyScript compiler is not installed in %s: run scripts/setup.sh", nm)
				}
				if err := os.Symlink(nm, filepath.Join(proj, "node_modules")); err != nil {
					t.Fatal(err)
				}
			}
			if r := runWith(t, proj, nil, 10*time.Minute, "build"); r.code != 0 {
				t.Fatalf("build: exit %d\n%s", r.code, r.stderr)
			}
			out := filepath.Join(dir, "counts.txt")
			r := runWith(t, proj, nil, 60*time.Minute, "deploy", "-q", "-p", "1", "--data", filepath.Join(dir, "data"),
				"--source", "file:path="+in, "--sink", "file:path="+out, filepath.Join("build", name+".wasm"))
			if r.code != 0 {
				t.Fatalf("deploy: exit %d\n%s", r.code, r.stderr)
			}
			checkScaleCounts(t, out, keys)
		})
	}
}

// scaleWord is the i-th distinct word of writeScaleWords, which occurs
// scaleCount(i) times.
func scaleWord(i int) string { return "w" + strconv.FormatUint(uint64(i)*0x9E3779B1%(1<<40), 36) }

func scaleCount(i int) int64 { return int64(1 + i%3) }

// writeScaleWords writes keys distinct words, word i scaleCount(i) times,
// eight to a line, the repetitions of a word far apart.
func writeScaleWords(t *testing.T, path string, keys int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	n := 0
	for round := range int64(3) {
		for i := range keys {
			if scaleCount(i) <= round {
				continue
			}
			w.WriteString(scaleWord(i))
			if n++; n%8 == 0 {
				w.WriteByte('\n')
			} else {
				w.WriteByte(' ')
			}
		}
	}
	w.WriteByte('\n')
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkScaleCounts reads the word<TAB>count lines the job wrote and checks
// them against writeScaleWords: every word once, with its count.
func checkScaleCounts(t *testing.T, path string, keys int) {
	t.Helper()
	want := make(map[string]int, keys)
	for i := range keys {
		want[scaleWord(i)] = i
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, keys)
	got, bad := 0, 0
	for _, l := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		word, count, ok := bytes.Cut(l, []byte("\t"))
		i, known := want[string(word)]
		c, err := strconv.ParseInt(string(count), 10, 64)
		switch {
		case !ok || err != nil:
			t.Fatalf("line %q is not word<TAB>count", l)
		case !known:
			t.Fatalf("word %q is not in the input", word)
		case seen[i]:
			t.Fatalf("word %q counted on two lines", word)
		}
		seen[i] = true
		got++
		if c != scaleCount(i) {
			if bad++; bad <= 5 {
				t.Errorf("%q: %d, want %d", word, c, scaleCount(i))
			}
		}
	}
	if got != keys || bad > 0 {
		t.Fatalf("%d of %d words counted, %d with a wrong count", got, keys, bad)
	}
	t.Logf("%d distinct words counted exactly", keys)
}
