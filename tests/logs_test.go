package tests

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
)

// TestLogFormats: --log-format json writes one JSON object a line, each
// with its level and the ids it concerns, checkpoint events at info; the
// text format writes key=value lines; bad values are usage errors (exit 2)
// that name the flag.
func TestLogFormats(t *testing.T) {
	mod := module(t, "wordcount")
	dir := t.TempDir()
	r := runCLI(t, dir, "deploy", "--log-format", "json", "--log-level", "info", "--checkpoint-interval", "50ms",
		"--source", "gen:count=200000,keys=50", "--sink", "discard", mod)
	if r.code != 0 {
		t.Fatalf("deploy: exit %d\n%s", r.code, r.stderr)
	}
	var job string
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(r.stderr))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			// The job's own lines (running, the summary) are not log lines.
			continue
		}
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		msg, _ := e["msg"].(string)
		level, _ := e["level"].(string)
		if level == "" || e["time"] == nil {
			t.Errorf("log line without level or time: %s", line)
		}
		if level == "DEBUG" {
			t.Errorf("a debug line at --log-level info: %s", line)
		}
		switch msg {
		case "attempt deployed", "checkpoint triggered", "checkpoint completed", "job ended":
			id, _ := e["job"].(string)
			if id == "" || (job != "" && id != job) {
				t.Errorf("%q names job %q (want one job id throughout): %s", msg, id, line)
			}
			job = id
			if strings.HasPrefix(msg, "checkpoint") && (e["checkpoint"] == nil || level != "INFO") {
				t.Errorf("%q without a checkpoint id, or not at info: %s", msg, line)
			}
			seen[msg] = true
		}
	}
	for _, want := range []string{"attempt deployed", "checkpoint triggered", "checkpoint completed", "job ended"} {
		if !seen[want] {
			t.Errorf("no %q line in\n%s", want, r.stderr)
		}
	}

	// The default for deploy is warn: a healthy job logs nothing.
	r = runCLI(t, dir, "deploy", "--source", "gen:count=1000,keys=5", "--sink", "discard", mod)
	if r.code != 0 || strings.Contains(r.stderr, "level=") {
		t.Fatalf("deploy at the default level: exit %d, logged\n%s", r.code, r.stderr)
	}
	// -v is debug, in the text format.
	r = runCLI(t, dir, "-v", "deploy", "--source", "gen:count=1000,keys=5", "--sink", "discard", mod)
	if r.code != 0 || !strings.Contains(r.stderr, "level=INFO msg=\"attempt deployed\" component=coordinator job=") {
		t.Fatalf("deploy -v: exit %d\n%s", r.code, r.stderr)
	}

	for _, c := range []struct{ flag, value, says string }{
		{"--log-format", "xml", `--log-format: log format "xml": want text or json`},
		{"--log-level", "loud", `--log-level: log level "loud": want debug, info, warn or error`},
	} {
		r := runCLI(t, dir, "deploy", c.flag, c.value, mod)
		if r.code != 2 || !strings.Contains(r.stderr, c.says) {
			t.Errorf("deploy %s %s: exit %d, want 2 and %q\n%s", c.flag, c.value, r.code, c.says, r.stderr)
		}
	}
}
