package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/wstream/wstream/api"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/job"
	"github.com/wstream/wstream/tenant"
	"github.com/wstream/wstream/transport"
)

// HTTPURLFile is where an engine that serves the UI and the REST API
// writes their base URL.
func HTTPURLFile(dataDir string) string { return filepath.Join(dataDir, "http.url") }

// startAPI starts the HTTP listener of the UI and the REST API; with
// tenants, a request is whoever its API token names.
func (e *Engine) startAPI(o Options) error {
	cfg := api.Config{Coordinator: e.coord, Addr: o.HTTP, Log: o.Log, Metrics: e.MetricsHandler(), MaxModuleBytes: o.MaxModuleBytes,
		Deploy: e.deployUpload,
		Upgrade: func(ctx context.Context, req transport.UpgradeRequest) (*transport.UpgradeReply, error) {
			return coordinator.Upgrade(ctx, e.nc, req)
		}}
	if a := o.Tenants; a != nil {
		cfg.Auth = func(token string) (coordinator.Caller, bool) {
			name, ok := a.CheckAPIToken(token)
			if !ok {
				return coordinator.Caller{}, false
			}
			if name == tenant.Admin {
				return coordinator.Caller{}, true
			}
			return coordinator.Caller{Tenant: name}, true
		}
	}
	s, err := api.Start(cfg)
	if err != nil {
		return fmt.Errorf("--http %s: %w", o.HTTP, err)
	}
	e.api = s
	e.coord.SetHTTPURL(s.URL())
	if err := os.WriteFile(HTTPURLFile(o.DataDir), []byte(s.URL()+"\n"), 0o644); err != nil {
		return err
	}
	return nil
}

// HTTPURL is the base URL of the engine's UI and REST API ("" when it
// serves none).
func (e *Engine) HTTPURL() string {
	if e.api == nil {
		return ""
	}
	return e.api.URL()
}

// Coordinator is the engine's coordinator (nil for a client of a cluster).
func (e *Engine) Coordinator() *coordinator.Coordinator { return e.coord }

// deployUpload runs a module uploaded through the REST API (POST
// /v1/jobs) as `wstream deploy --nats` would, for who: the job belongs to
// the caller's tenant.
func (e *Engine) deployUpload(ctx context.Context, who coordinator.Caller, req api.DeployRequest) (string, error) {
	dir, err := os.MkdirTemp("", "wstream-upload-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	o := PrepareOptions{ModulePath: filepath.Join(dir, req.ModuleName), Overrides: req.Overrides, Name: req.Name}
	if err := os.WriteFile(o.ModulePath, req.Module, 0o600); err != nil {
		return "", err
	}
	if req.Plan != nil {
		o.PlanPath = filepath.Join(dir, "plan.json")
		if err := os.WriteFile(o.PlanPath, req.Plan, 0o600); err != nil {
			return "", err
		}
	}
	if req.CheckpointIntervalMillis > 0 {
		o.Settings = func(p *job.Plan) {
			if p.Checkpoint == nil {
				p.Checkpoint = &job.CheckpointSettings{}
			}
			p.Checkpoint.Interval = req.CheckpointIntervalMillis
		}
	}
	d, err := Prepare(ctx, e.rt, o)
	if err != nil {
		return "", err
	}
	d.Tenant = who.Tenant
	return e.Submit(ctx, d)
}
