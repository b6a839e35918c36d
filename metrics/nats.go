package metrics

import (
	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
)

var natsDescs = struct {
	connections, subscriptions, slowConsumers     *prometheus.Desc
	inMsgs, outMsgs, inBytes, outBytes, mem       *prometheus.Desc
	streams, consumers, jsMessages, jsBytes       *prometheus.Desc
	jsMemory, jsStore, jsAPIRequests, jsAPIErrors *prometheus.Desc
}{
	connections:   desc("wstream_nats_connections", "Client connections of the embedded NATS server."),
	subscriptions: desc("wstream_nats_subscriptions", "Subscriptions on the embedded NATS server."),
	slowConsumers: desc("wstream_nats_slow_consumers_total", "Clients the embedded NATS server disconnected as slow consumers."),
	inMsgs:        desc("wstream_nats_in_messages_total", "Messages the embedded NATS server received."),
	outMsgs:       desc("wstream_nats_out_messages_total", "Messages the embedded NATS server sent."),
	inBytes:       desc("wstream_nats_in_bytes_total", "Bytes the embedded NATS server received."),
	outBytes:      desc("wstream_nats_out_bytes_total", "Bytes the embedded NATS server sent."),
	mem:           desc("wstream_nats_resident_memory_bytes", "Resident memory the embedded NATS server reports (the whole process's)."),
	streams:       desc("wstream_nats_jetstream_streams", "JetStream streams on the embedded server (every account)."),
	consumers:     desc("wstream_nats_jetstream_consumers", "JetStream consumers on the embedded server (every account)."),
	jsMessages:    desc("wstream_nats_jetstream_messages", "Messages stored in JetStream streams on the embedded server."),
	jsBytes:       desc("wstream_nats_jetstream_bytes", "Bytes stored in JetStream streams on the embedded server."),
	jsMemory:      desc("wstream_nats_jetstream_memory_bytes", "Memory JetStream uses for memory-backed streams."),
	jsStore:       desc("wstream_nats_jetstream_storage_bytes", "Disk JetStream uses for file-backed streams."),
	jsAPIRequests: desc("wstream_nats_jetstream_api_requests_total", "JetStream API requests the embedded server received."),
	jsAPIErrors:   desc("wstream_nats_jetstream_api_errors_total", "JetStream API requests that the embedded server answered with an error."),
}

// NATSCollector collects the figures of an embedded NATS server from its
// monitoring endpoints' data (varz and jsz), read in process.
type NATSCollector struct{ s *server.Server }

// NewNATSCollector returns the collector of s.
func NewNATSCollector(s *server.Server) *NATSCollector { return &NATSCollector{s: s} }

// Describe implements prometheus.Collector.
func (c *NATSCollector) Describe(ch chan<- *prometheus.Desc) {
	d := natsDescs
	for _, x := range []*prometheus.Desc{d.connections, d.subscriptions, d.slowConsumers, d.inMsgs, d.outMsgs, d.inBytes,
		d.outBytes, d.mem, d.streams, d.consumers, d.jsMessages, d.jsBytes, d.jsMemory, d.jsStore, d.jsAPIRequests, d.jsAPIErrors} {
		ch <- x
	}
}

// Collect implements prometheus.Collector.
func (c *NATSCollector) Collect(ch chan<- prometheus.Metric) {
	d := natsDescs
	put := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
		ch <- prometheus.MustNewConstMetric(d, t, v)
	}
	if v, err := c.s.Varz(nil); err == nil {
		put(d.connections, prometheus.GaugeValue, float64(v.Connections))
		put(d.subscriptions, prometheus.GaugeValue, float64(v.Subscriptions))
		put(d.slowConsumers, prometheus.CounterValue, float64(v.SlowConsumers))
		put(d.inMsgs, prometheus.CounterValue, float64(v.InMsgs))
		put(d.outMsgs, prometheus.CounterValue, float64(v.OutMsgs))
		put(d.inBytes, prometheus.CounterValue, float64(v.InBytes))
		put(d.outBytes, prometheus.CounterValue, float64(v.OutBytes))
		put(d.mem, prometheus.GaugeValue, float64(v.Mem))
	}
	if !c.s.JetStreamEnabled() {
		return
	}
	if j, err := c.s.Jsz(nil); err == nil {
		put(d.streams, prometheus.GaugeValue, float64(j.Streams))
		put(d.consumers, prometheus.GaugeValue, float64(j.Consumers))
		put(d.jsMessages, prometheus.GaugeValue, float64(j.Messages))
		put(d.jsBytes, prometheus.GaugeValue, float64(j.Bytes))
		put(d.jsMemory, prometheus.GaugeValue, float64(j.Memory))
		put(d.jsStore, prometheus.GaugeValue, float64(j.Store))
		put(d.jsAPIRequests, prometheus.CounterValue, float64(j.API.Total))
		put(d.jsAPIErrors, prometheus.CounterValue, float64(j.API.Errors))
	}
}
