package tenant

import (
	"fmt"
	"regexp"
)

// Quotas bound what one tenant may use. A zero field takes its default
// (DefaultQuotas); every bound is checked by the coordinator before a job
// of the tenant starts, by the workers while it runs, or by NATS (the
// JetStream limits of the tenant's account).
type Quotas struct {
	// Jobs is how many jobs of the tenant may run at once.
	Jobs int `json:"jobs,omitempty"`
	// Subtasks is how many subtasks (slots) the tenant's running jobs may
	// hold together, across workers.
	Subtasks int `json:"subtasks,omitempty"`
	// Parallelism bounds the parallelism and max parallelism of each
	// vertex of a job.
	Parallelism int `json:"parallelism,omitempty"`
	// MemoryMiB bounds the linear memory of each operator instance.
	MemoryMiB int `json:"memory_mib,omitempty"`
	// StateBytes bounds the keyed state of one subtask on a worker's disk,
	// its pending timers included: they are state, and the bound on them.
	StateBytes int64 `json:"state_bytes,omitempty"`
	// StateWriteRate paces the keyed state the tenant's subtasks on one
	// worker write to its disk, bytes per second: past it (and a burst of
	// a second's worth), a subtask waits between inputs, holding no slot,
	// until the rate has caught up. The disk's writeback and Pebble's
	// compactions of a flood of state are work no slot of the cores
	// counts; the rate bounds them.
	StateWriteRate int64 `json:"state_write_rate,omitempty"`
	// StorageBytes bounds the tenant's JetStream file storage: data
	// streams, modules, checkpoints in object stores, staged sink output.
	StorageBytes int64 `json:"storage_bytes,omitempty"`
	// MemoryStorageBytes bounds its JetStream memory storage.
	MemoryStorageBytes int64 `json:"memory_storage_bytes,omitempty"`
	// Streams bounds its JetStream streams (key-value buckets and object
	// stores are streams too).
	Streams int64 `json:"streams,omitempty"`
	// ModuleBytes bounds the size of one module of the tenant's jobs: the
	// coordinator and the workers check it (with the object's size, and
	// again while reading) before they fetch a module from the tenant's
	// store, and they fetch no more.
	ModuleBytes int64 `json:"module_bytes,omitempty"`
	// Weight is the tenant's share of a worker's cores against other
	// tenants' (fair sharing of guest calls).
	Weight int `json:"weight,omitempty"`
}

// DefaultQuotas are the quotas of a tenant added without any.
var DefaultQuotas = Quotas{
	Jobs:               16,
	Subtasks:           64,
	Parallelism:        16,
	MemoryMiB:          64,
	StateBytes:         1 << 30,
	StateWriteRate:     16 << 20,
	StorageBytes:       4 << 30,
	MemoryStorageBytes: 256 << 20,
	Streams:            256,
	ModuleBytes:        64 << 20,
	Weight:             1,
}

// WithDefaults fills the zero fields of q from DefaultQuotas.
func (q Quotas) WithDefaults() Quotas { return DefaultQuotas.Merge(q) }

// Merge returns q with every non-zero field of o in place of q's: o's
// zero fields leave q's alone. It is the one merge of quotas, defaults
// and updates alike.
func (q Quotas) Merge(o Quotas) Quotas {
	override(&q.Jobs, o.Jobs)
	override(&q.Subtasks, o.Subtasks)
	override(&q.Parallelism, o.Parallelism)
	override(&q.MemoryMiB, o.MemoryMiB)
	override(&q.StateBytes, o.StateBytes)
	override(&q.StateWriteRate, o.StateWriteRate)
	override(&q.StorageBytes, o.StorageBytes)
	override(&q.MemoryStorageBytes, o.MemoryStorageBytes)
	override(&q.Streams, o.Streams)
	override(&q.ModuleBytes, o.ModuleBytes)
	override(&q.Weight, o.Weight)
	return q
}

// override sets *dst to v unless v is zero (unset).
func override[T int | int64](dst *T, v T) {
	if v != 0 {
		*dst = v
	}
}

// Check refuses negative quotas and a memory bound beyond WebAssembly's.
func (q Quotas) Check() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"jobs", int64(q.Jobs)}, {"subtasks", int64(q.Subtasks)}, {"parallelism", int64(q.Parallelism)},
		{"memory", int64(q.MemoryMiB)}, {"state", q.StateBytes}, {"state write rate", q.StateWriteRate}, {"storage", q.StorageBytes},
		{"memory storage", q.MemoryStorageBytes}, {"streams", q.Streams}, {"module bytes", q.ModuleBytes}, {"weight", int64(q.Weight)},
	} {
		if f.v < 0 {
			return fmt.Errorf("quota %s: %d is negative", f.name, f.v)
		}
	}
	if q.MemoryMiB > 4096 {
		return fmt.Errorf("quota memory: %d MiB exceeds WebAssembly's 4096 MiB", q.MemoryMiB)
	}
	return nil
}

// Admin is the name the control plane gives requests made with the
// service account's credentials: they see and act on every tenant's jobs.
const Admin = "admin"

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// CheckName refuses tenant names that are not one lower-case word of at
// most 32 characters (they appear in file names and logs) or that are
// reserved.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("tenant name %q: use 1–32 characters a-z, 0-9, '_' and '-', starting with a letter", name)
	}
	if name == Admin || name == "system" || name == "service" {
		return fmt.Errorf("tenant name %q is reserved", name)
	}
	return nil
}
