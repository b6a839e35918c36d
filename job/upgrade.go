package job

import (
	"fmt"
	"strings"
)

// State kinds a plan declares; they are the ABI's state_register kinds.
const (
	StateValue = "value"
	StateMap   = "map"
)

// StateKinds lists the kinds a state declaration may have.
var StateKinds = []string{StateValue, StateMap}

// StateDecl declares one keyed state of an operator vertex: its name (as
// the operator registers it), its kind and the version of its value layout.
// A new module that stores a state's values differently raises Version; on
// restore from a savepoint of a lower version the host passes every entry
// of the state through the module's wstream_migrate export (abi/ABI.md).
type StateDecl struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Version of the value layout, 1 when absent.
	Version int `json:"version,omitempty"`
}

// State returns the vertex's declaration of state name, or nil.
func (v *Vertex) State(name string) *StateDecl {
	for i := range v.States {
		if v.States[i].Name == name {
			return &v.States[i]
		}
	}
	return nil
}

// UpgradeError is CheckUpgrade's refusal: every difference between the
// running plan and the new one that an upgrade cannot cross.
type UpgradeError struct {
	Differences []string
}

func (e *UpgradeError) Error() string {
	if len(e.Differences) == 1 {
		return "the new plan cannot replace the running one: " + e.Differences[0]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the new plan cannot replace the running one (%d differences):", len(e.Differences))
	for _, d := range e.Differences {
		b.WriteString("\n  - ")
		b.WriteString(d)
	}
	return b.String()
}

// CheckUpgrade checks that plan next can take over the state of a job that
// runs plan old, at a savepoint: the same max parallelism (key groups
// cannot be remapped); every vertex of old still there under its id, of the
// same kind, and sources and sinks on the same connector (a source resumes
// at its recorded position, a sink commits under its identity); and, for
// states both plans declare, the same kind and a layout version that does
// not go back. A state old declares and next does not, for a vertex whose
// states next declares, would be dropped silently and is refused too. Both
// plans must be valid (Validate). Vertices next adds start empty;
// parallelism may change. It returns nil or an *UpgradeError listing every
// difference, in old's vertex order.
func CheckUpgrade(old, next *Plan) error {
	var diffs []string
	add := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	if old.MaxParallelism != next.MaxParallelism {
		add("max parallelism %d of the running job differs from the new plan's %d (key groups cannot be remapped)", old.MaxParallelism, next.MaxParallelism)
	}
	for i := range old.Vertices {
		ov := &old.Vertices[i]
		nv := next.Vertex(ov.ID)
		if nv == nil {
			add("vertex %q (%s) of the running job is missing from the new plan (vertex ids must be kept)", ov.ID, ov.Kind)
			continue
		}
		if ov.Kind != nv.Kind {
			add("vertex %q is of kind %s in the running job and %s in the new plan", ov.ID, ov.Kind, nv.Kind)
			continue
		}
		if ov.Kind != KindOperator && ov.Connector != nv.Connector {
			add("%s %q uses connector %q in the running job and %q in the new plan", ov.Kind, ov.ID, ov.Connector, nv.Connector)
		}
		for _, os := range ov.States {
			ns := nv.State(os.Name)
			switch {
			case ns == nil && len(nv.States) > 0:
				add("state %q of vertex %q is not declared by the new plan (its values would be dropped)", os.Name, ov.ID)
			case ns == nil:
			case ns.Kind != os.Kind:
				add("state %q of vertex %q is a %s state in the running job and a %s state in the new plan", os.Name, ov.ID, os.Kind, ns.Kind)
			case ns.Version < os.Version:
				add("state %q of vertex %q goes back from layout version %d to %d (values cannot be migrated back)", os.Name, ov.ID, os.Version, ns.Version)
			}
		}
	}
	if diffs != nil {
		return &UpgradeError{Differences: diffs}
	}
	return nil
}

// Migration is a state whose values a restore passes through the module's
// wstream_migrate: the new plan raised its layout version.
type Migration struct {
	Vertex   string
	Operator string
	State    string
	// From is the version the savepoint's values have, To the new one.
	From, To int
}

// Migrations returns the states of next whose layout version is higher
// than old's, in next's vertex and state order. A state old does not
// declare counts as version 1 there.
func Migrations(old, next *Plan) []Migration {
	var out []Migration
	for i := range next.Vertices {
		nv := &next.Vertices[i]
		ov := old.Vertex(nv.ID)
		if ov == nil || ov.Kind != KindOperator {
			continue
		}
		for _, ns := range nv.States {
			from := 1
			if os := ov.State(ns.Name); os != nil {
				from = os.Version
			}
			if ns.Version > from {
				out = append(out, Migration{Vertex: nv.ID, Operator: nv.Operator, State: ns.Name, From: from, To: ns.Version})
			}
		}
	}
	return out
}
