package state

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

type modelTimer struct {
	ts      int64
	key, ns string
}

func compareModel(a, b modelTimer) int {
	if c := cmp.Compare(a.ts, b.ts); c != 0 {
		return c
	}
	if c := cmp.Compare(len(a.key), len(b.key)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.key, b.key); c != 0 {
		return c
	}
	return cmp.Compare(a.ns, b.ns)
}

func queueTimer(m modelTimer) *timer {
	pk := AppendTimerKey(nil, 0, "v", 0, m.ts, []byte(m.key), []byte(m.ns))
	return newTimer(m.ts, pk, len(m.key), len(m.ns))
}

func TestTimerQueueAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	var q timerQueue
	model := map[modelTimer]bool{}
	for step := range 20000 {
		m := modelTimer{ts: int64(r.IntN(50)) - 25, key: string(rune('a' + r.IntN(4))), ns: string(rune('x' + r.IntN(3)))}
		probe := queueTimer(m)
		found := q.find(probe.pk)
		if (found != nil) != model[m] {
			t.Fatalf("step %d: find(%v) = %v, model %t", step, m, found, model[m])
		}
		switch op := r.IntN(10); {
		case op < 5:
			if found == nil {
				q.add(probe)
				model[m] = true
			}
		case op < 8:
			if found != nil {
				q.remove(found)
				delete(model, m)
			}
		default:
			want := slices.SortedFunc(func(yield func(modelTimer) bool) {
				for k := range model {
					if !yield(k) {
						return
					}
				}
			}, compareModel)
			if len(want) == 0 {
				if q.pop() != nil {
					t.Fatalf("step %d: pop from empty queue returned a timer", step)
				}
				continue
			}
			got := q.pop()
			if got.ts != want[0].ts || string(got.key) != want[0].key || string(got.ns) != want[0].ns {
				t.Fatalf("step %d: pop = (%d, %s, %s), want %v", step, got.ts, got.key, got.ns, want[0])
			}
			delete(model, want[0])
		}
		if q.len() != len(model) || len(q.set) != len(model) {
			t.Fatalf("step %d: heap %d, set %d, model %d", step, q.len(), len(q.set), len(model))
		}
		for i, tm := range q.heap {
			if tm.index != i {
				t.Fatalf("step %d: timer at %d records index %d", step, i, tm.index)
			}
			if i > 0 && timerBefore(tm, q.heap[(i-1)/2]) {
				t.Fatalf("step %d: heap order violated at %d", step, i)
			}
		}
	}
}

func TestNewTimerSlicesKeyAndNamespace(t *testing.T) {
	pk := AppendTimerKey(nil, 1, "vertex", 1, -5, []byte("the-key"), []byte("ns"))
	tm := newTimer(-5, pk, len("the-key"), len("ns"))
	pk[len(pk)-1] = 'X' // the timer owns a copy
	if string(tm.key) != "the-key" || string(tm.ns) != "ns" || tm.ts != -5 {
		t.Fatalf("timer = (%d, %q, %q)", tm.ts, tm.key, tm.ns)
	}
	if bytes.Equal(tm.pk, pk) {
		t.Fatal("timer aliases the caller's key buffer")
	}
	// Appending to the key slice must not overwrite the namespace.
	_ = append(tm.key, 'Z')
	if string(tm.ns) != "ns" {
		t.Fatalf("namespace overwritten through key: %q", tm.ns)
	}
}
