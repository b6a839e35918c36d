package metrics

import (
	"net/http"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/worker"
)

// Registry is a process's metrics: Go's runtime and the process from the
// start, and the collectors of what the process runs as it adds them.
type Registry struct {
	reg *prometheus.Registry
}

// New returns a registry with the Go runtime and process collectors.
func New() *Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Registry{reg: reg}
}

// Handler serves the registry in Prometheus' exposition formats (text, or
// what the scraper negotiates).
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Gatherer is the registry, for tests and for embedding in another one.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Register adds a collector of the caller's.
func (r *Registry) Register(c prometheus.Collector) error { return r.reg.Register(c) }

// AddWorkers adds the collector of the process's workers; call it once,
// with all of them.
func (r *Registry) AddWorkers(ws ...*worker.Worker) error {
	if len(ws) == 0 {
		return nil
	}
	srcs := make([]WorkerSource, len(ws))
	for k, w := range ws {
		srcs[k] = w
	}
	return r.reg.Register(NewWorkerCollector(srcs...))
}

// AddCoordinator adds the coordinator's collector.
func (r *Registry) AddCoordinator(c *coordinator.Coordinator) error {
	return r.reg.Register(NewCoordinatorCollector(c))
}

// AddNATSServer adds the collector of the NATS server that the process
// embeds.
func (r *Registry) AddNATSServer(s *server.Server) error {
	return r.reg.Register(NewNATSCollector(s))
}
