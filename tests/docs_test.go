package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// The docs' command lines are checked against the CLI itself, so that a
// renamed flag or command, or a changed message, fails here rather than
// misleading a reader:
//
//   - every `wstream …` line of a fenced code block in README.md and
//     docs/*.md (the `$ ` lines only, in a block that has a prompt; blocks
//     that are run, below, aside), and every `wstream …` code span of
//     their text, must
//     name an existing command (and subcommand) and only flags that
//     command has, as `wstream CMD --help` lists them;
//   - a block right after a `<!-- doc-test -->` line is run: each
//     `$ wstream …` line in a fresh directory, its stdout and stderr
//     compared with the lines that follow it (`…` stands for any text
//     within a line), and `$ echo $?` with the exit status. With
//     `<!-- doc-test wordcount.wasm -->` the directory holds the word
//     count module first: the wat project of `wstream init`, built.

// docBlock is one fenced code block of a document.
type docBlock struct {
	file  string
	line  int // of the opening fence
	lines []string
	run   bool   // preceded by <!-- doc-test -->
	setup string // <!-- doc-test wordcount.wasm -->: the module it needs
}

// docTestMark marks a block to run, optionally with the word count module
// (the wat project wstream init writes, built) as wordcount.wasm in its
// directory.
//
// <!-- doc-test server --> runs the block against a `wstream server` of its
// own (tenants on, one in-process worker, data directory srv, which
// WSTREAM_DATA names for the block's commands): the block's
// nats://127.0.0.1:4222 stands for the server's URL.
var docTestMark = regexp.MustCompile(`^<!-- doc-test( wordcount\.wasm| server)? -->$`)

// inlineCommand is a command in a code span of the text: `wstream …`.
var inlineCommand = regexp.MustCompile("`(wstream [^`]+)`")

// docBlocks returns the fenced code blocks of README.md and docs/*.md,
// and each code span of their text that holds a command line as a block
// of its own.
func docBlocks(t *testing.T) []docBlock {
	t.Helper()
	root := testmod.Root()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var out []docBlock
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		var cur *docBlock
		marked, setup := false, ""
		for i, l := range strings.Split(string(b), "\n") {
			trimmed := strings.TrimSpace(l)
			switch {
			case cur == nil && strings.HasPrefix(trimmed, "```"):
				cur = &docBlock{file: rel, line: i + 1, run: marked, setup: setup}
				marked, setup = false, ""
			case cur != nil && trimmed == "```":
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.lines = append(cur.lines, l)
			case docTestMark.MatchString(trimmed):
				marked, setup = true, strings.TrimSpace(docTestMark.FindStringSubmatch(trimmed)[1])
			case trimmed != "":
				marked, setup = false, ""
				for _, m := range inlineCommand.FindAllStringSubmatch(l, -1) {
					out = append(out, docBlock{file: rel, line: i, lines: []string{m[1]}})
				}
			}
		}
		if cur != nil {
			t.Fatalf("%s:%d: code block not closed", rel, cur.line)
		}
	}
	return out
}

// docCommand is one `wstream …` command line of a document.
type docCommand struct {
	where string
	args  []string // after "wstream"
}

// commandLines returns the wstream command lines of a block: its `$ `
// lines when it has any (the rest is output), else every line that starts
// with `wstream `. A line ending in a backslash goes on on the next.
func commandLines(b docBlock) []docCommand {
	prompt := slices.ContainsFunc(b.lines, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "$ ") })
	var out []docCommand
	for i := 0; i < len(b.lines); i++ {
		l := strings.TrimSpace(b.lines[i])
		start := i
		for strings.HasSuffix(l, `\`) && i+1 < len(b.lines) {
			i++
			l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(b.lines[i])
		}
		if prompt {
			if !strings.HasPrefix(l, "$ ") {
				continue
			}
			l = strings.TrimPrefix(l, "$ ")
		}
		if k := strings.Index(l, "<(wstream "); k >= 0 {
			l = l[k+2:] // source <(wstream completion bash)
		}
		words := shellWords(l)
		// Leading VAR=value assignments.
		for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
			words = words[1:]
		}
		if len(words) == 0 || words[0] != "wstream" || len(words) > 1 && strings.HasSuffix(words[1], ":") {
			continue // not a command, or a line of output ("wstream server: …")
		}
		out = append(out, docCommand{where: fmt.Sprintf("%s:%d", b.file, b.line+1+start), args: words[1:]})
	}
	return out
}

// shellWords splits a command line as a shell would, as far as the docs
// need: quotes group, and a comment, pipe, redirection or command
// separator ends the command.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	flush := func() {
		if inWord {
			words = append(words, cur.String())
		}
		cur.Reset()
		inWord = false
	}
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			flush()
		case !inWord && (r == '#' || r == '|' || r == '>' || r == '<' || r == ';' || r == '&'):
			flush()
			return words
		case r == ')' && !strings.Contains(cur.String(), "$("):
			// The end of a $(…) the command sits in.
			flush()
			return words
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return words
}

// cliHelp is what `wstream [CMD…] --help` says a command takes.
type cliHelp struct {
	flags    map[string]bool // name (with dashes) → takes a value
	commands []string        // subcommands (with aliases)
}

type helpCache struct {
	t     *testing.T
	bin   string
	cache map[string]*cliHelp
}

// help returns the flags and subcommands of the command at path, or nil
// when there is no such command.
func (h *helpCache) help(path []string) *cliHelp {
	key := strings.Join(path, " ")
	if c, ok := h.cache[key]; ok {
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, append(slices.Clone(path), "--help")...)
	cmd.Env = append(os.Environ(), "WSTREAM_CONFIG="+filepath.Join(h.t.TempDir(), "contexts.json"))
	out, err := cmd.CombinedOutput()
	var c *cliHelp
	if err == nil {
		c = parseHelp(string(out))
	}
	h.cache[key] = c
	return c
}

// parseHelp reads the OPTIONS and COMMANDS sections of urfave/cli's help.
func parseHelp(s string) *cliHelp {
	c := &cliHelp{flags: map[string]bool{}}
	section := ""
	for _, l := range strings.Split(s, "\n") {
		if l != "" && l[0] != ' ' {
			section = strings.TrimSuffix(strings.TrimSpace(l), ":")
			continue
		}
		head, _, _ := strings.Cut(strings.TrimSpace(l), "  ")
		if head == "" {
			continue
		}
		switch {
		case strings.Contains(section, "OPTIONS") && strings.HasPrefix(head, "-"):
			for _, alt := range strings.Split(head, ", ") {
				name, arg, _ := strings.Cut(alt, " ")
				c.flags[name] = arg != ""
			}
		case section == "COMMANDS":
			for _, name := range strings.Split(head, ", ") {
				c.commands = append(c.commands, strings.TrimSuffix(name, ":"))
			}
		}
	}
	return c
}

// checkCommand says what is wrong with a documented command line, or "".
func (h *helpCache) checkCommand(args []string) string {
	global := h.help(nil)
	if global == nil {
		return "wstream --help failed"
	}
	var path []string
	cur := global
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return ""
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 && !isNumber(a) {
			name, _, hasValue := strings.Cut(a, "=")
			// A global flag after a command is refused unless the
			// command has it too, so cur's flags alone.
			takes, ok := cur.flags[name]
			if !ok && !strings.HasPrefix(name, "--") && len(name) > 2 {
				// -p4: a short flag with its value attached.
				_, ok = cur.flags[name[:2]]
				hasValue = true
			}
			if !ok {
				return fmt.Sprintf("%s has no flag %s", strings.Join(append([]string{"wstream"}, path...), " "), name)
			}
			if takes && !hasValue {
				i++
			}
			continue
		}
		if len(cur.commands) == 0 {
			continue // an argument
		}
		if regexp.MustCompile(`^[A-Z]+$`).MatchString(a) {
			return "" // a placeholder: wstream CMD --help
		}
		// add|update: each is a command; the first goes on.
		alts := strings.Split(strings.ReplaceAll(a, `\|`, "|"), "|")
		for _, alt := range alts {
			if !slices.Contains(cur.commands, alt) {
				return fmt.Sprintf("%s has no command %q", strings.Join(append([]string{"wstream"}, path...), " "), alt)
			}
		}
		a = alts[0]
		if a == "help" || a == "h" {
			return ""
		}
		path = append(path, a)
		cur = h.help(path)
		if cur == nil {
			return fmt.Sprintf("wstream %s --help failed", strings.Join(path, " "))
		}
	}
	if len(path) == 0 && !slices.Contains(args, "--version") && !slices.Contains(args, "--help") && !slices.Contains(args, "-h") {
		return "names no command"
	}
	return ""
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// TestDocsCommandLines checks every documented command line against the
// CLI's commands and flags.
func TestDocsCommandLines(t *testing.T) {
	h := &helpCache{t: t, bin: wstreamBin(t), cache: map[string]*cliHelp{}}
	n := 0
	for _, b := range docBlocks(t) {
		if b.run {
			// Run by TestDocsOutputs, which compares what they print:
			// some show a usage error on purpose.
			continue
		}
		for _, c := range commandLines(b) {
			n++
			if msg := h.checkCommand(c.args); msg != "" {
				t.Errorf("%s: wstream %s: %s", c.where, strings.Join(c.args, " "), msg)
			}
		}
	}
	// The docs show over two hundred; far fewer means the extraction
	// broke, not that the docs are right.
	if n < 150 {
		t.Errorf("found %d wstream command lines in README.md and docs/, want at least 150", n)
	}
	t.Logf("%d command lines checked", n)
}

// TestDocsCommandLinesCheck makes sure the check catches what it is for.
func TestDocsCommandLinesCheck(t *testing.T) {
	h := &helpCache{t: t, bin: wstreamBin(t), cache: map[string]*cliHelp{}}
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{"wstream deploy -p 4 --checkpoint-interval 1s job.wasm # comment", true},
		{"wstream -v deploy job.wasm -v --log-level=debug", true},
		{`wstream context add prod --nats nats://10.0.0.5:4222 --token "$(cat admin.token)"`, true},
		{"wstream tenant add acme", true},
		{"wstream tenant add|update acme", true},
		{"wstream CMD --help", true},
		{"wstream tenant add|frob acme", false},
		{"wstream deploy --no-such-flag job.wasm", false},
		{"wstream deploi job.wasm", false},
		{"wstream context frobnicate", false},
		{"wstream list --checkpoint-interval 1s", false},
		{"wstream version -v", false},
		{"wstream -o json", false},
	} {
		words := shellWords(tc.line)
		msg := h.checkCommand(words[1:])
		if (msg == "") != tc.ok {
			t.Errorf("%q: check says %q, want ok=%v", tc.line, msg, tc.ok)
		}
	}
}

// TestDocsOutputs runs the blocks marked <!-- doc-test --> and compares
// the output and exit statuses they show.
func TestDocsOutputs(t *testing.T) {
	bin := wstreamBin(t)
	n := 0
	for _, b := range docBlocks(t) {
		if !b.run {
			continue
		}
		n++
		t.Run(fmt.Sprintf("%s:%d", b.file, b.line), func(t *testing.T) {
			runDocBlock(t, bin, b)
		})
	}
	if n < 4 {
		t.Errorf("found %d blocks marked <!-- doc-test --> in README.md and docs/, want at least 4", n)
	}
}

// docNATSURL is the server a doc-test server block names.
const docNATSURL = "nats://127.0.0.1:4222"

// runDocBlock runs the `$ ` lines of b in a directory of its own, with
// contexts of its own.
func runDocBlock(t *testing.T, bin string, b docBlock) {
	dir := t.TempDir()
	env := append(os.Environ(), "WSTREAM_CONFIG="+filepath.Join(dir, "contexts.json"), "HOME="+dir, "XDG_CONFIG_HOME="+dir)
	if b.setup == "wordcount.wasm" {
		proj := t.TempDir()
		for _, args := range [][]string{{"init", "--lang", "wat", "--dir", proj, "wordcount"}, {"build", proj}} {
			if r := runWith(t, dir, env, time.Minute, args...); r.code != 0 {
				t.Fatalf("wstream %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
			}
		}
		wasm, err := os.ReadFile(filepath.Join(proj, "build", "wordcount.wasm"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "wordcount.wasm"), wasm, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	natsURL := ""
	if b.setup == "server" {
		srv := startTestServer(t, dir)
		natsURL = srv.url
		env = append(env, "WSTREAM_DATA="+srv.data)
	}
	lastCode := -1
	for i := 0; i < len(b.lines); {
		l := strings.TrimSpace(b.lines[i])
		if !strings.HasPrefix(l, "$ ") {
			t.Fatalf("%s:%d: a doc-test block starts each command with `$ `, got %q", b.file, b.line+1+i, l)
		}
		where := fmt.Sprintf("%s:%d", b.file, b.line+1+i)
		cmdLine := strings.TrimPrefix(l, "$ ")
		j := i + 1
		for j < len(b.lines) && !strings.HasPrefix(strings.TrimSpace(b.lines[j]), "$ ") {
			j++
		}
		want := strings.Join(b.lines[i+1:j], "\n")
		i = j
		if cmdLine == "echo $?" {
			if got := strconv.Itoa(lastCode); strings.TrimSpace(want) != got {
				t.Errorf("%s: exit status %s, the doc says %s", where, got, want)
			}
			continue
		}
		words := shellWords(cmdLine)
		for k, w := range words {
			if natsURL != "" && w == docNATSURL {
				words[k] = natsURL
			}
		}
		if len(words) == 0 || words[0] != "wstream" {
			t.Fatalf("%s: a doc-test block runs wstream and echo $? only, got %q", where, cmdLine)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, words[1:]...)
		cmd.Dir, cmd.Env = dir, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		lastCode = 0
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			lastCode = ee.ExitCode()
		case err != nil:
			t.Fatalf("%s: %s: %v", where, cmdLine, err)
		}
		got := out.String()
		if natsURL != "" {
			got = strings.ReplaceAll(got, natsURL, docNATSURL)
		}
		if !outputMatches(want, got) {
			t.Errorf("%s: %s printed\n%s\nthe doc shows\n%s", where, cmdLine, got, want)
		}
	}
}

// outputMatches compares output with a documented one, line for line,
// trailing spaces aside; `…` in want stands for any text within a line.
func outputMatches(want, got string) bool {
	norm := func(s string) []string {
		var out []string
		for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
			out = append(out, strings.TrimRight(l, " "))
		}
		return out
	}
	w, g := norm(want), norm(got)
	if len(w) != len(g) {
		return false
	}
	for k := range w {
		parts := strings.Split(w[k], "…")
		for p := range parts {
			parts[p] = regexp.QuoteMeta(parts[p])
		}
		if !regexp.MustCompile("^" + strings.Join(parts, ".*") + "$").MatchString(g[k]) {
			return false
		}
	}
	return true
}

// TestDocsOutputMatches checks the placeholder comparison.
func TestDocsOutputMatches(t *testing.T) {
	for _, tc := range []struct {
		want, got string
		ok        bool
	}{
		{"wstream … (ABI v1)…", "wstream 0.1.0-dev (ABI v1) commit 811a565e1f2b\n", true},
		{"wstream … (ABI v1)…", "wstream 0.1.0-dev (ABI v2)\n", false},
		{"a\nb", "a\n", false},
		{"a  ", "a\n", true},
		{"x.y", "xzy", false},
	} {
		if got := outputMatches(tc.want, tc.got); got != tc.ok {
			t.Errorf("outputMatches(%q, %q) = %v, want %v", tc.want, tc.got, got, tc.ok)
		}
	}
}
