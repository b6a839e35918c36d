package transport

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestControlActionDecode: a checkpoint message carries one of the four
// actions; one with any other fails to decode, naming the action.
func TestControlActionDecode(t *testing.T) {
	for _, a := range []ControlAction{CheckpointTrigger, CheckpointComplete, CheckpointAbort, CheckpointStop} {
		b, err := json.Marshal(CheckpointControl{JobID: "j", Action: a, ID: 3})
		if err != nil {
			t.Fatal(err)
		}
		var c CheckpointControl
		if err := json.Unmarshal(b, &c); err != nil || c.Action != a || c.ID != 3 {
			t.Errorf("round trip of %q: %+v, %v", a, c, err)
		}
	}
	for _, s := range []string{`"Trigger"`, `"commit"`, `""`, `7`} {
		var c CheckpointControl
		err := json.Unmarshal([]byte(`{"jobId":"j","action":`+s+`,"id":1}`), &c)
		if err == nil {
			t.Errorf("action %s decoded to %+v", s, c)
		} else if s != `7` && !strings.Contains(err.Error(), "checkpoint control action") {
			t.Errorf("action %s: error %v does not name the action", s, err)
		}
	}
}

// TestParseTenantOp: the seven operations parse; any other is refused with
// the operations listed.
func TestParseTenantOp(t *testing.T) {
	for _, op := range []TenantOp{TenantAdd, TenantUpdate, TenantRemove, TenantList, TenantCreds, TenantWorkerCreds, TenantWorkerRevoke} {
		if got, err := ParseTenantOp(string(op)); err != nil || got != op {
			t.Errorf("ParseTenantOp(%q) = %q, %v", op, got, err)
		}
	}
	for _, s := range []string{"", "Add", "delete"} {
		if _, err := ParseTenantOp(s); err == nil || !strings.Contains(err.Error(), "unknown tenant operation") {
			t.Errorf("ParseTenantOp(%q): error %v", s, err)
		}
	}
}
