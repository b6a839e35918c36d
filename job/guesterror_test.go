package job

import (
	"strings"
	"testing"
)

func TestParseOnGuestError(t *testing.T) {
	for _, c := range []struct {
		spec, policy, connector, config, err string
	}{
		{spec: "fail", policy: OnGuestErrorFail},
		{spec: "dead-letter", policy: OnGuestErrorDeadLetter},
		{spec: "dead-letter:file:path=dead", policy: OnGuestErrorDeadLetter, connector: "file", config: `{"path":"dead"}`},
		{spec: "dead-letter:stdout", policy: OnGuestErrorDeadLetter, connector: "stdout"},
		{spec: "fail:file:path=x", err: "takes no sink"},
		{spec: "retry", err: "want fail, dead-letter or dead-letter:SINK"},
		{spec: "dead-letter:nosuch", err: "no sink named"},
		{spec: "dead-letter:file:bogus=1", err: "bogus"},
		{spec: "dead-letter:x=file:path=d", err: "no vertex"},
	} {
		g, err := ParseOnGuestError(c.spec)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseOnGuestError(%q) = %v, want an error with %q", c.spec, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseOnGuestError(%q): %v", c.spec, err)
			continue
		}
		if g.Policy != c.policy || (c.connector == "") != (g.Sink == nil) ||
			(g.Sink != nil && (g.Sink.Connector != c.connector || string(g.Sink.Config) != c.config)) {
			t.Errorf("ParseOnGuestError(%q) = %+v (sink %+v)", c.spec, g, g.Sink)
		}
	}
}

func TestParseDeadLetterBudget(t *testing.T) {
	for _, c := range []struct {
		spec string
		max  int64
		per  string
		ok   bool
	}{
		{"10", 10, BudgetPerJob, true},
		{"10/checkpoint", 10, BudgetPerCheckpoint, true},
		{"unlimited", -1, BudgetPerJob, true},
		{"0", 0, "", false},
		{"-3", 0, "", false},
		{"10/minute", 0, "", false},
		{"many", 0, "", false},
	} {
		max, per, err := ParseDeadLetterBudget(c.spec)
		if (err == nil) != c.ok || (c.ok && (max != c.max || per != c.per)) {
			t.Errorf("ParseDeadLetterBudget(%q) = %d, %q, %v", c.spec, max, per, err)
		}
	}
}

const guestErrorPlan = `{"name":"p","vertices":[
  {"id":"src","kind":"source","connector":"gen"},
  {"id":"op","kind":"operator","operator":"x"},
  {"id":"snk","kind":"sink","connector":"discard"}],
 "edges":[{"from":"src","to":"op"},{"from":"op","to":"snk"}],
 "onGuestError":%s}`

// TestOnGuestErrorPlanField: the field round-trips through the stored
// plan, and bad values are refused with their path.
func TestOnGuestErrorPlanField(t *testing.T) {
	good := `{"policy":"dead-letter","sink":{"connector":"file","config":{"path":"dead"}},"maxDeadLetters":5,"budgetPer":"checkpoint"}`
	p, err := Parse([]byte(strings.Replace(guestErrorPlan, "%s", good, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	q, err := Parse(p.JSON())
	if err != nil {
		t.Fatal(err)
	}
	g := q.OnGuestError
	if !g.DeadLetters() || g.Sink.Connector != "file" || string(g.Sink.Config) != `{"path":"dead"}` {
		t.Fatalf("round trip: %+v", g)
	}
	if max, per := g.Budget(); max != 5 || !per {
		t.Errorf("budget %d per checkpoint %t, want 5 per checkpoint", max, per)
	}
	c := q.Clone()
	c.OnGuestError.Sink.Connector = "stdout"
	if q.OnGuestError.Sink.Connector != "file" {
		t.Error("Clone shares the dead-letter sink")
	}
	if max, _ := (&GuestErrorSettings{Policy: OnGuestErrorDeadLetter}).Budget(); max != DefaultMaxDeadLetters {
		t.Errorf("default budget %d, want %d", max, DefaultMaxDeadLetters)
	}
	for field, want := range map[string]string{
		`{"policy":"retry"}`:                                   `onGuestError.policy: "retry" must be`,
		`{"policy":"dead-letter","maxDeadLetters":-2}`:         "onGuestError.maxDeadLetters",
		`{"policy":"dead-letter","budgetPer":"hour"}`:          "onGuestError.budgetPer",
		`{"policy":"fail","sink":{"connector":"file"}}`:        "onGuestError.sink: applies to policy",
		`{"policy":"dead-letter","sink":{"connector":"file"}}`: "onGuestError.sink: connector file: config.path",
		`{"policy":"dead-letter","sink":{"connector":"tape"}}`: "onGuestError.sink",
		`{"policy":"dead-letter","retries":3}`:                 "retries",
	} {
		p, err := Parse([]byte(strings.Replace(guestErrorPlan, "%s", field, 1)))
		if err == nil {
			err = p.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("onGuestError %s: %v, want an error with %q", field, err, want)
		}
	}
}
