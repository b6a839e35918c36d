package job

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/wstream/wstream/connector"
)

// Guest-error policies (plan field "onGuestError.policy").
const (
	// OnGuestErrorFail fails the job (which then restarts per its restart
	// strategy): the default.
	OnGuestErrorFail = "fail"
	// OnGuestErrorDeadLetter rolls the failing operator's keyed state back
	// to the start of the batch, finds the record(s) or timer(s) that fail,
	// sends each to the dead-letter sink and goes on.
	OnGuestErrorDeadLetter = "dead-letter"
)

// Dead-letter budget scopes (plan field "onGuestError.budgetPer").
const (
	// BudgetPerJob counts a subtask's dead letters over the job's life,
	// across restarts (the count is part of its checkpoints).
	BudgetPerJob = "job"
	// BudgetPerCheckpoint counts a subtask's dead letters since its last
	// checkpoint.
	BudgetPerCheckpoint = "checkpoint"
)

// DefaultMaxDeadLetters is the budget of a subtask when the plan sets none.
const DefaultMaxDeadLetters = 1000

// GuestErrorSettings say what a guest trap or fail while processing a batch
// or firing timers does (plan field "onGuestError"; deploy flags
// --on-guest-error and --max-dead-letters). See docs/dead-letters.md.
type GuestErrorSettings struct {
	// Policy: "fail" (the default) or "dead-letter".
	Policy string `json:"policy"`
	// Sink receives the dead letters, one JSON object per failed record or
	// timer. nil: a file sink under the worker's data directory,
	// jobs/JOB/dead-letters. A file sink writes each chain's dead letters
	// in a directory of its own, path/CHAIN, where CHAIN is the id of the
	// chain's first vertex.
	Sink *DeadLetterSink `json:"sink,omitempty"`
	// MaxDeadLetters is the most dead letters one subtask of an operator
	// chain may send within BudgetPer; one more fails the job. 0: the
	// default (DefaultMaxDeadLetters); -1: unlimited.
	MaxDeadLetters int64 `json:"maxDeadLetters,omitempty"`
	// BudgetPer: "job" (the default: over the job's life) or "checkpoint"
	// (since the subtask's last checkpoint).
	BudgetPer string `json:"budgetPer,omitempty"`
}

// DeadLetterSink is a sink connector and its configuration, as a sink
// vertex of the plan names them.
type DeadLetterSink struct {
	Connector string          `json:"connector"`
	Config    json.RawMessage `json:"config,omitempty"`
}

// DeadLetters reports whether failed records go to a dead-letter sink.
func (g *GuestErrorSettings) DeadLetters() bool {
	return g != nil && g.Policy == OnGuestErrorDeadLetter
}

// Budget returns the most dead letters a subtask may send (-1: unlimited)
// and whether the count starts over at each checkpoint.
func (g *GuestErrorSettings) Budget() (max int64, perCheckpoint bool) {
	max = g.MaxDeadLetters
	if max == 0 {
		max = DefaultMaxDeadLetters
	}
	return max, g.BudgetPer == BudgetPerCheckpoint
}

func (g *GuestErrorSettings) clone() *GuestErrorSettings {
	if g == nil {
		return nil
	}
	c := *g
	if g.Sink != nil {
		s := *g.Sink
		s.Config = bytes.Clone(g.Sink.Config)
		c.Sink = &s
	}
	return &c
}

func (g *GuestErrorSettings) validate() error {
	if g == nil {
		return nil
	}
	switch g.Policy {
	case OnGuestErrorFail, OnGuestErrorDeadLetter:
	default:
		return errorf("onGuestError.policy", "%q must be %q or %q", g.Policy, OnGuestErrorFail, OnGuestErrorDeadLetter)
	}
	switch {
	case g.MaxDeadLetters < -1:
		return errorf("onGuestError.maxDeadLetters", "%d must be ≥ -1 (-1: unlimited, 0: the default of %d)", g.MaxDeadLetters, DefaultMaxDeadLetters)
	case g.BudgetPer != "" && g.BudgetPer != BudgetPerJob && g.BudgetPer != BudgetPerCheckpoint:
		return errorf("onGuestError.budgetPer", "%q must be %q or %q", g.BudgetPer, BudgetPerJob, BudgetPerCheckpoint)
	case g.Sink != nil && g.Policy != OnGuestErrorDeadLetter:
		return errorf("onGuestError.sink", "applies to policy %q only, not %q", OnGuestErrorDeadLetter, g.Policy)
	}
	if g.Sink != nil {
		if err := connector.ValidateSink(g.Sink.Connector, g.Sink.Config); err != nil {
			return errorf("onGuestError.sink", "%v", err)
		}
	}
	return nil
}

// ParseOnGuestError parses the value of --on-guest-error: "fail",
// "dead-letter", or "dead-letter:SINK" with SINK a sink connector spec,
// CONNECTOR[:k=v,...] (e.g. dead-letter:file:path=dead or
// dead-letter:jetstream:url=nats://h:4222,stream=DL,subject=dl).
func ParseOnGuestError(spec string) (*GuestErrorSettings, error) {
	policy, sink, hasSink := strings.Cut(spec, ":")
	switch policy {
	case OnGuestErrorFail:
		if hasSink {
			return nil, fmt.Errorf("%q: policy %s takes no sink", spec, OnGuestErrorFail)
		}
		return &GuestErrorSettings{Policy: OnGuestErrorFail}, nil
	case OnGuestErrorDeadLetter:
	default:
		return nil, fmt.Errorf("%q: want %s, %s or %s:SINK", spec, OnGuestErrorFail, OnGuestErrorDeadLetter, OnGuestErrorDeadLetter)
	}
	g := &GuestErrorSettings{Policy: OnGuestErrorDeadLetter}
	if !hasSink {
		return g, nil
	}
	cs, err := ParseConnectorSpec(sink)
	if err != nil {
		return nil, fmt.Errorf("%q: the dead-letter sink: %w", spec, err)
	}
	if cs.ID != "" {
		return nil, fmt.Errorf("%q: the dead-letter sink is no vertex: drop %q=", spec, cs.ID)
	}
	cfg := map[string]json.RawMessage{}
	for _, f := range cs.Fields {
		cfg[f.Key] = f.Value
	}
	g.Sink = &DeadLetterSink{Connector: cs.Connector}
	if len(cfg) > 0 {
		g.Sink.Config, _ = json.Marshal(cfg)
	}
	if err := connector.ValidateSink(g.Sink.Connector, g.Sink.Config); err != nil {
		return nil, fmt.Errorf("%q: %w", spec, err)
	}
	return g, nil
}

// ParseDeadLetterBudget parses the value of --max-dead-letters: N (over the
// job's life) or N/checkpoint (since the subtask's last checkpoint), N ≥ 1,
// or "unlimited".
func ParseDeadLetterBudget(spec string) (max int64, per string, err error) {
	if spec == "unlimited" {
		return -1, BudgetPerJob, nil
	}
	n, scope, scoped := strings.Cut(spec, "/")
	per = BudgetPerJob
	if scoped {
		if scope != BudgetPerCheckpoint {
			return 0, "", fmt.Errorf("%q: want N, N/checkpoint or unlimited", spec)
		}
		per = BudgetPerCheckpoint
	}
	max, err = strconv.ParseInt(n, 10, 64)
	if err != nil || max < 1 {
		return 0, "", fmt.Errorf("%q: want N, N/checkpoint or unlimited, with N ≥ 1", spec)
	}
	return max, per, nil
}
