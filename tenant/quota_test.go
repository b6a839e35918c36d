package tenant

import (
	"reflect"
	"strings"
	"testing"
)

// TestModuleBytesQuota: the module size quota has its default, is kept by
// an update that does not name it and changed by one that does, and may
// not be negative.
func TestModuleBytesQuota(t *testing.T) {
	if q := (Quotas{}).WithDefaults(); q.ModuleBytes != 64<<20 {
		t.Fatalf("default module bytes %d, want 64 MiB", q.ModuleBytes)
	}
	q := Quotas{ModuleBytes: 1 << 20}.WithDefaults()
	if q.ModuleBytes != 1<<20 {
		t.Fatalf("module bytes %d, want 1 MiB", q.ModuleBytes)
	}
	if m := q.Merge(Quotas{Jobs: 3}); m.ModuleBytes != 1<<20 || m.Jobs != 3 {
		t.Fatalf("an update of jobs: %+v", m)
	}
	if m := q.Merge(Quotas{ModuleBytes: 5}); m.ModuleBytes != 5 {
		t.Fatalf("an update of module bytes: %+v", m)
	}
	if err := (Quotas{ModuleBytes: -1}).Check(); err == nil || !strings.Contains(err.Error(), "quota module bytes: -1 is negative") {
		t.Fatalf("negative module bytes: %v", err)
	}
}

// TestQuotasMergeEveryField guards the one merge against a field added to
// Quotas and forgotten in Merge: every field set in o must win.
func TestQuotasMergeEveryField(t *testing.T) {
	var o Quotas
	v := reflect.ValueOf(&o).Elem()
	for i := range v.NumField() {
		v.Field(i).SetInt(int64(i + 7))
	}
	if got := DefaultQuotas.Merge(o); got != o {
		t.Fatalf("Merge dropped a field: got %+v, want %+v", got, o)
	}
	if got := o.Merge(Quotas{}); got != o {
		t.Fatalf("Merge of zero quotas changed %+v to %+v", o, got)
	}
	if got := (Quotas{}).WithDefaults(); got != DefaultQuotas {
		t.Fatalf("WithDefaults of zero quotas = %+v, want %+v", got, DefaultQuotas)
	}
}
