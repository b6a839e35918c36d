package job

import (
	"strings"
	"testing"
)

const settingsBase = `"vertices":[{"id":"s","kind":"source","connector":"gen"},{"id":"o","kind":"sink","connector":"discard"}],"edges":[{"from":"s","to":"o"}]`

func TestCheckpointAndRestartSettings(t *testing.T) {
	p, err := Parse([]byte(`{"name":"x",` + settingsBase + `,
	  "checkpoint":{"interval":200,"mode":"unaligned","timeout":5000,"retain":2},
	  "restart":{"strategy":"fixed-delay","attempts":3,"delay":100}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if !p.Checkpoint.Enabled() || p.Checkpoint.Mode != ModeUnaligned || p.Checkpoint.Retain != 2 || p.Restart.Attempts != 3 {
		t.Fatalf("settings = %+v %+v", p.Checkpoint, p.Restart)
	}
	again, err := Parse(p.JSON())
	if err != nil || again.Checkpoint == nil || *again.Checkpoint != *p.Checkpoint || *again.Restart != *p.Restart {
		t.Fatalf("JSON round trip lost settings: %+v %v", again, err)
	}
	c := p.Clone()
	c.Checkpoint.Interval = 1
	if p.Checkpoint.Interval != 200 {
		t.Fatal("Clone shares the checkpoint settings")
	}
	var none *CheckpointSettings
	if none.Enabled() {
		t.Fatal("nil settings enabled")
	}
}

func TestSettingsValidation(t *testing.T) {
	cases := []struct{ settings, want string }{
		{`"checkpoint":{"interval":-1}`, "checkpoint.interval: -1 must be ≥ 0"},
		{`"checkpoint":{"interval":1,"mode":"exact"}`, `checkpoint.mode: "exact" must be`},
		{`"checkpoint":{"interval":1,"mode":"unaligned","alignedTimeout":5}`, "checkpoint.alignedTimeout: applies to mode"},
		{`"checkpoint":{"interval":1,"tolerableFailures":-2}`, "checkpoint.tolerableFailures"},
		{`"checkpoint":{"interval":1,"retain":-1}`, "checkpoint.retain"},
		{`"checkpoint":{"interval":1,"storage":"/shared/ckpt"}`, `checkpoint.storage: "/shared/ckpt": want nats-obj://BUCKET`},
		{`"checkpoint":{"interval":1,"storage":"nats-obj://"}`, `checkpoint.storage: "nats-obj://": want nats-obj://BUCKET`},
		{`"checkpoint":{"intervall":1}`, `checkpoint: unknown field "intervall"`},
		{`"restart":{"strategy":"always"}`, `restart.strategy: "always" must be`},
		{`"restart":{"strategy":"fixed-delay","delay":-1}`, "restart.delay"},
		{`"restart":{"strategy":"exponential-backoff","multiplier":0.5}`, "restart.multiplier"},
	}
	for _, c := range cases {
		p, err := Parse([]byte(`{"name":"x",` + settingsBase + `,` + c.settings + `}`))
		if err == nil {
			err = p.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.settings, err, c.want)
		}
	}
}

func TestRestartDelays(t *testing.T) {
	fixed := &RestartSettings{Strategy: RestartFixedDelay, Attempts: 2, Delay: 50}
	for a, want := range map[int]bool{1: true, 2: true, 3: false} {
		if d, ok := fixed.DelayBefore(a); ok != want || (ok && d != 50) {
			t.Errorf("fixed attempt %d = %d, %t", a, d, ok)
		}
	}
	exp := &RestartSettings{Strategy: RestartExponential, Delay: 10, MaxDelay: 70}
	for a, want := range map[int]int64{1: 10, 2: 20, 3: 40, 4: 70, 9: 70} {
		if d, ok := exp.DelayBefore(a); !ok || d != want {
			t.Errorf("exponential attempt %d = %d, %t; want %d", a, d, ok, want)
		}
	}
	var none *RestartSettings
	if _, ok := none.DelayBefore(1); ok {
		t.Error("nil strategy restarts")
	}
	if _, ok := (&RestartSettings{Strategy: RestartNone}).DelayBefore(1); ok {
		t.Error("none restarts")
	}
}
