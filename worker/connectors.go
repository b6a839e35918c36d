package worker

import (
	"encoding/json"
	"fmt"

	"github.com/wstream/wstream/connector"
)

// newSource builds a source connector of job j; see confine.
func (w *Worker) newSource(j *jobRun, name string, raw json.RawMessage) (connector.Source, error) {
	cfg, err := connector.DecodeSource(name, raw)
	return build(j, cfg, err, connector.NewSourceFrom)
}

// newSink builds a sink connector of job j; see confine.
func (w *Worker) newSink(j *jobRun, name string, raw json.RawMessage) (connector.Sink, error) {
	cfg, err := connector.DecodeSink(name, raw)
	return build(j, cfg, err, func(c connector.Config) (connector.Sink, error) { return connector.NewSinkFrom(c, w.cfg.Stdout) })
}

// build makes the connector of a decoded configuration (err: the decode's
// error) once confine allows it, and gives it the job's connection.
func build[C any](j *jobRun, cfg connector.Config, err error, make func(connector.Config) (C, error)) (C, error) {
	var none C
	if err != nil {
		return none, err
	}
	if err := j.confine(cfg); err != nil {
		return none, err
	}
	c, err := make(cfg)
	if err != nil {
		return none, err
	}
	if dd, ok := any(c).(connector.Dialed); ok && j.dial != nil {
		dd.SetDialer(j.dial)
		if r, ok := any(c).(connector.Replicated); ok {
			r.SetReplicas(j.replicas)
		}
	}
	return c, nil
}

// confine refuses, for a tenant's job, a connector configuration that
// reaches beyond the tenant's account: a NATS server, credentials or TLS
// files, a file of the host, the host's terminal. The coordinator refuses
// such plans already; the worker checks again, on the decoded value it
// builds the connector from, so that a plan which got past the coordinator
// still cannot make the worker dial elsewhere or read its files. What is
// left of a JetStream connector uses the tenant's own connection (j.dial).
func (j *jobRun) confine(cfg connector.Config) error {
	if j.tenant == "" {
		return nil
	}
	for _, r := range cfg.Reach() {
		if r.Field == "" {
			return fmt.Errorf("connector %s: tenant %s's job may not reach %s", cfg.Connector(), j.tenant, r.What)
		}
		return fmt.Errorf("connector %s: config.%s: names %s, which tenant %s's job may not: its connectors use the tenant's own account", cfg.Connector(), r.Field, r.What, j.tenant)
	}
	if j.dial == nil {
		return fmt.Errorf("connector %s: tenant %s's job has no connection to its account", cfg.Connector(), j.tenant)
	}
	return nil
}
