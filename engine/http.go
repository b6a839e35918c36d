package engine

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/wstream/wstream/api"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/tenant"
)

// HTTPURLFile is where an engine that serves the UI and the REST API
// writes their base URL.
func HTTPURLFile(dataDir string) string { return filepath.Join(dataDir, "http.url") }

// startAPI starts the HTTP listener of the UI and the REST API; with
// tenants, a request is whoever its API token names.
func (e *Engine) startAPI(o Options) error {
	cfg := api.Config{Coordinator: e.coord, Addr: o.HTTP, Log: o.Log, Metrics: e.MetricsHandler()}
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
