package coordinator

import (
	"strconv"
	"strings"
	"testing"

	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/tenant"
)

func TestTenantRestartBacksOff(t *testing.T) {
	for _, c := range []struct {
		in, want job.RestartSettings
	}{
		{job.RestartSettings{Strategy: job.RestartFixedDelay, Delay: 0}, job.RestartSettings{Strategy: job.RestartExponential, Delay: 1000, MaxDelay: 300000}},
		{job.RestartSettings{Strategy: job.RestartFixedDelay, Attempts: 3, Delay: 10}, job.RestartSettings{Strategy: job.RestartFixedDelay, Attempts: 3, Delay: 1000}},
		{job.RestartSettings{Strategy: job.RestartFixedDelay, Attempts: 3, Delay: 5000}, job.RestartSettings{Strategy: job.RestartFixedDelay, Attempts: 3, Delay: 5000}},
		{job.RestartSettings{Strategy: job.RestartExponential, Delay: 1, MaxDelay: 2, Multiplier: 1}, job.RestartSettings{Strategy: job.RestartExponential, Delay: 1000, MaxDelay: 300000, Multiplier: 1.5}},
		{job.RestartSettings{Strategy: job.RestartExponential, Delay: 1000, MaxDelay: 1000}, job.RestartSettings{Strategy: job.RestartExponential, Delay: 1000, MaxDelay: 300000}},
		{job.RestartSettings{Strategy: job.RestartExponential, Attempts: 5, Delay: 1000, MaxDelay: 1000}, job.RestartSettings{Strategy: job.RestartExponential, Attempts: 5, Delay: 1000, MaxDelay: 1000}},
		{job.RestartSettings{Strategy: job.RestartNone}, job.RestartSettings{Strategy: job.RestartNone}},
	} {
		p := &job.Plan{Restart: &c.in}
		tenantRestart(p)
		if *p.Restart != c.want {
			t.Errorf("%+v: got %+v, want %+v", c.in, *p.Restart, c.want)
		}
	}
	tenantRestart(&job.Plan{}) // no strategy: nothing to do
}

func TestTenantPlanChecks(t *testing.T) {
	q := tenant.Quotas{Parallelism: 4, Subtasks: 10}.WithDefaults()
	plan := func(p int, sink string) string {
		return `{"name":"t","parallelism":` + strconv.Itoa(p) + `,"vertices":[
 {"id":"src","kind":"source","connector":"gen","config":{"count":10}},
 {"id":"sink","kind":"sink",` + sink + `}],"edges":[{"from":"src","to":"sink","partition":"rebalance"}]}`
	}
	dl := func(settings string) string {
		return strings.Replace(plan(2, `"connector":"discard"`), `"name":"t",`, `"name":"t","onGuestError":{`+settings+`},`, 1)
	}
	for _, c := range []struct {
		plan, want string
	}{
		{plan(2, `"connector":"discard"`), ""},
		{plan(5, `"connector":"discard"`), `vertex "src": parallelism 5 is over the tenant's quota of 4`},
		{plan(2, `"connector":"file","config":{"path":"/etc/x"}`), `connector file: config.path: names a file of the host; tenant jobs may not`},
		{plan(2, `"connector":"stdout"`), `connector stdout: reaches the host's terminal`},
		{plan(2, `"connector":"jetstream","config":{"url":"nats://x:1","stream":"S","subject":"s"}`), `connector jetstream: config.url: names a NATS server; a tenant job's JetStream connectors use the tenant's own account`},
		{plan(2, `"connector":"jetstream","config":{"stream":"S","subject":"s"}`), ""},
		// The dead-letter sink is a sink like the others, and its default
		// (a file on the worker) is no tenant's.
		{dl(`"policy":"dead-letter"`), `onGuestError: a tenant job names its dead-letter sink`},
		{dl(`"policy":"dead-letter","sink":{"connector":"file","config":{"path":"/tmp/x"}}`), `onGuestError: the dead-letter sink: connector file: config.path`},
		{dl(`"policy":"dead-letter","sink":{"connector":"jetstream","config":{"url":"nats://x:1","stream":"D","subject":"d"}}`), `onGuestError: the dead-letter sink: connector jetstream: config.url`},
		{dl(`"policy":"dead-letter","sink":{"connector":"jetstream","config":{"stream":"D","subject":"d"}}`), ""},
		{dl(`"policy":"fail"`), ""},
	} {
		p, err := job.Parse([]byte(c.plan))
		if err != nil {
			t.Fatal(err)
		}
		g, err := job.Build(p)
		if err != nil {
			t.Fatal(err)
		}
		err = checkTenantPlan(p, g, q)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.plan, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want %q", c.plan, err, c.want)
		}
	}
}

// TestTenantConnectorDecoded: checkTenantConnector judges the config as
// the connector decodes it. Every connection field of both JetStream
// connectors, in its own spelling or any other case, is refused, and an
// empty one (which the connector ignores) is not.
func TestTenantConnectorDecoded(t *testing.T) {
	fields := map[string]string{"url": "nats://x:1", "creds": "/data/auth/worker.creds", "nkey": "/k", "user": "u",
		"password": "p", "token": "t", "tlsCA": "/ca", "tlsCert": "/c", "tlsKey": "/k"}
	for _, kind := range []string{job.KindSource, job.KindSink} {
		for f, v := range fields {
			for _, name := range []string{f, strings.ToUpper(f), strings.ToUpper(f[:1]) + f[1:], strings.ToLower(f)} {
				cfg := `{"stream":"S","subject":"s",` + strconv.Quote(name) + `:` + strconv.Quote(v) + `}`
				err := checkTenantConnector(kind, "jetstream", []byte(cfg))
				if err == nil {
					t.Errorf("%s %s: allowed", kind, cfg)
				} else if name != f && !strings.Contains(err.Error(), `did you mean "`+f+`"`) {
					t.Errorf("%s %s: %v, want the right spelling named", kind, cfg, err)
				}
			}
		}
		if err := checkTenantConnector(kind, "jetstream", []byte(`{"url":"","stream":"S","subject":"s"}`)); err != nil {
			t.Errorf("%s with an empty url: %v", kind, err)
		}
	}
}
