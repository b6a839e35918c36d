package transport

// SubtaskMetrics is one subtask's live figures as its worker last sampled
// them. Counters are totals since the subtask started (its attempt); the
// coordinator derives rates from two samples. Workers send them to the
// coordinator, which serves them to the REST API and the metrics endpoint.
type SubtaskMetrics struct {
	JobID   string `json:"jobId"`
	Attempt int    `json:"attempt"`
	Worker  string `json:"worker"`
	Vertex  string `json:"vertex"`
	Subtask int    `json:"subtask"`
	// Tenant owns the job ("" on a cluster without tenants).
	Tenant string `json:"tenant,omitempty"`

	RecordsIn  int64 `json:"recordsIn"`
	RecordsOut int64 `json:"recordsOut"`
	BytesIn    int64 `json:"bytesIn"`
	BytesOut   int64 `json:"bytesOut"`

	// BusyMillis is time spent processing (guest calls and host work),
	// BackpressuredMillis time blocked sending downstream, IdleMillis time
	// waiting for input: Flink's busy/backpressured/idle split.
	BusyMillis          int64 `json:"busyMillis"`
	BackpressuredMillis int64 `json:"backpressuredMillis"`
	IdleMillis          int64 `json:"idleMillis"`

	// Watermark is the subtask's current event-time watermark in Unix
	// milliseconds; HasWatermark is false until it has one.
	Watermark    int64 `json:"watermark"`
	HasWatermark bool  `json:"hasWatermark"`

	// StateBytes is the keyed state's estimated size on disk (its Pebble
	// files and memtables), as of the subtask's last measurement (about
	// once a second while it processes input).
	StateBytes int64 `json:"stateBytes"`
	// StateWrittenBytes is what the subtask's keyed state has written to
	// Pebble (committed batches, before compactions), as of the same
	// measurement; StatePacedMillis is the time the subtask waited
	// between inputs under its tenant's state write rate.
	StateWrittenBytes int64 `json:"stateWrittenBytes,omitempty"`
	StatePacedMillis  int64 `json:"statePacedMillis,omitempty"`

	// RemoteInputs counts the subtask's input channels from other workers
	// and ExchangeLagMillis is the largest age over them of the oldest
	// message received and not yet taken, since JetStream stored it (on
	// the row of the chain's first vertex). RemoteOutputs counts its
	// output channels to other workers and ExchangeInFlight the messages
	// they published that the consumers have not taken (on the row of the
	// chain's last vertex).
	RemoteInputs      int   `json:"remoteInputs,omitempty"`
	ExchangeLagMillis int64 `json:"exchangeLagMillis,omitempty"`
	RemoteOutputs     int   `json:"remoteOutputs,omitempty"`
	ExchangeInFlight  int64 `json:"exchangeInFlight,omitempty"`
	// DeadLetters counts the records and timers the subtask's operator
	// sent to the dead-letter sink (docs/dead-letters.md).
	DeadLetters int64 `json:"deadLetters"`

	// RecordsInPerSec and RecordsOutPerSec are filled in by the
	// coordinator from the previous sample.
	RecordsInPerSec  float64 `json:"recordsInPerSec"`
	RecordsOutPerSec float64 `json:"recordsOutPerSec"`

	// SampledAt is when the worker took the sample (Unix milliseconds).
	SampledAt int64 `json:"sampledAt"`
}

// SubjectMetrics is where workers publish their subtasks' samples
// (MetricsReport), about once a second. Workers are users of the service
// account; a tenant's requests arrive under tenant.APIPrefix and never on
// this subject.
const SubjectMetrics = "wstream.coord.metrics"

// MetricsReport carries a worker's latest samples of the subtasks it runs.
type MetricsReport struct {
	Worker   string           `json:"worker"`
	Subtasks []SubtaskMetrics `json:"subtasks"`
}
