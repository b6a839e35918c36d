package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/internal/testkit/testmod"
	"github.com/wstream/wstream/operator"
	"github.com/wstream/wstream/state"
)

// layout writes the strings into guest memory from addr on and returns
// the (ptr, len) of each.
func (g *rig) layout(addr uint32, strs ...string) [][2]uint32 {
	g.t.Helper()
	var pairs [][2]uint32
	for _, str := range strs {
		g.write(addr, []byte(str))
		pairs = append(pairs, [2]uint32{addr, uint32(len(str))})
		addr += uint32(len(str))
	}
	return pairs
}

// getRequests lays out the (key, ns) pairs at data and encodes
// state_get_many requests for them.
func (g *rig) getRequests(data uint32, pairs ...string) []byte {
	g.t.Helper()
	at := g.layout(data, pairs...)
	var b []byte
	for _, p := range at {
		b = binary.LittleEndian.AppendUint32(b, p[0])
		b = binary.LittleEndian.AppendUint32(b, p[1])
	}
	return b
}

// write is one entry of a state_write_batch list; del makes it a deletion.
type write struct {
	h            int32
	key, ns, val string
	del          bool
}

// stateWrites lays out the writes' bytes at data and encodes the list.
func (g *rig) stateWrites(data uint32, ws ...write) []byte {
	g.t.Helper()
	var b []byte
	for _, w := range ws {
		at := g.layout(data, w.key, w.ns, w.val)
		data += uint32(len(w.key) + len(w.ns) + len(w.val))
		vl := int32(len(w.val))
		if w.del {
			vl = -1
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(w.h))
		for _, p := range at[:2] {
			b = binary.LittleEndian.AppendUint32(b, p[0])
			b = binary.LittleEndian.AppendUint32(b, p[1])
		}
		b = binary.LittleEndian.AppendUint32(b, at[2][0])
		b = binary.LittleEndian.AppendUint32(b, uint32(vl))
	}
	return b
}

// results decodes the n state_get_many results at out: "=value" (or
// "=?N" for an N-byte value that was not copied) or a status name, with
// "@first" for a repeated request.
func (g *rig) results(out uint32, n int) []string {
	g.t.Helper()
	var r []string
	tab := g.read(out, uint32(resultSize*n))
	for j := range n {
		first := binary.LittleEndian.Uint32(tab[j*resultSize:])
		vlen := int32(binary.LittleEndian.Uint32(tab[j*resultSize+4:]))
		vptr := binary.LittleEndian.Uint32(tab[j*resultSize+8:])
		var str string
		switch {
		case vlen < 0:
			str = abi.StatusText(vlen)
		case vptr == 0:
			str = fmt.Sprintf("=?%d", vlen)
		default:
			str = "=" + string(g.read(vptr, uint32(vlen)))
		}
		if int(first) != j {
			str += fmt.Sprintf("@%d", first)
		}
		r = append(r, str)
	}
	return r
}

// foreignServices refuses the key "foreign" as a key group of another
// subtask, as the real state backend does for keys it does not own.
type foreignServices struct{ *fakeServices }

func (f *foreignServices) StateGet(h int32, key, ns, dst []byte) ([]byte, error) {
	if string(key) == "foreign" {
		return nil, operator.ErrKeyGroup
	}
	return f.fakeServices.StateGet(h, key, ns, dst)
}

func (f *foreignServices) StatePut(h int32, key, ns, value []byte) error {
	if string(key) == "foreign" {
		f.calls = append(f.calls, fmt.Sprintf("StatePut %q %q %q", key, ns, value))
		return operator.ErrKeyGroup
	}
	return f.fakeServices.StatePut(h, key, ns, value)
}

// manyServices is foreignServices answering state_get_many through
// operator.StateManyGetter, as package state does.
type manyServices struct{ *foreignServices }

func (m *manyServices) StateGetMany(h int32, n int, pair func(int) ([]byte, []byte), fn func(int, []byte, operator.StateRef, error) error) error {
	for j := range n {
		key, ns := pair(j)
		v, err := m.StateGet(h, key, ns, nil)
		if err := fn(j, v, 0, err); err != nil {
			return err
		}
	}
	return nil
}

// newBatchRig is newHostRig with memory pages of memory, over
// foreignServices.
func newBatchRig(t testing.TB, pages int) *rig {
	t.Helper()
	return newBatchRigOver(t, pages, false)
}

// newBatchRigOver is newBatchRig, over manyServices when many is set.
func newBatchRigOver(t testing.TB, pages int, many bool) *rig {
	t.Helper()
	return newBatchRigWith(t, pages, func(f *foreignServices) operator.Services {
		if many {
			return &manyServices{f}
		}
		return f
	})
}

// newBatchRigWith is newBatchRig over the services wrap makes of
// foreignServices.
func newBatchRigWith(t testing.TB, pages int, wrap func(*foreignServices) operator.Services) *rig {
	t.Helper()
	g := &rig{logs: &logSink{}, svc: newFakeServices(), out: &fakeCollector{}}
	g.t, _ = t.(*testing.T)
	r := newTestRuntime(t, Config{Log: g.logs.log})
	m := compileWAT(t, r, moduleWAT(map[string]string{abi.ExportMemory: fmt.Sprintf(`(memory (export "memory") %d)`, pages)}, trampolinesWAT()))
	g.inst = newInstance(t, m)
	g.s = g.inst.Operator().(*slot)
	svc := wrap(&foreignServices{g.svc})
	if err := g.s.Open(testSpec(), svc); err != nil {
		t.Fatal(err)
	}
	if h, err := g.svc.RegisterState("s", abi.StateValue); err != nil || h != 0 {
		t.Fatalf("RegisterState = %d, %v", h, err)
	}
	g.svc.calls = nil
	return g
}

// TestStateGetMany runs over services without StateGetMany, which the
// host asks one pair at a time, and over services with it.
func TestStateGetMany(t *testing.T) {
	t.Run("StateGet", func(t *testing.T) { testStateGetMany(t, false) })
	t.Run("StateGetMany", func(t *testing.T) { testStateGetMany(t, true) })
}

func testStateGetMany(t *testing.T, many bool) {
	g := newBatchRigOver(t, 2, many)
	g.svc.values[stateKey(0, []byte("abc"), []byte("a"))] = []byte("xyz")
	g.svc.values[stateKey(0, []byte("k2"), nil)] = []byte{}
	req := g.getRequests(3000, "abc", "a", "abc", "missing", "k2", "", "foreign", "", "abc", "a")
	g.write(2000, req)
	get := func(reqLen, outPtr, outCap int) int32 {
		return g.call(phaseProcess, ImportStateGetMany, 0, 2000, uint64(reqLen), uint64(outPtr), uint64(outCap))
	}
	// 5 results of 12 bytes, then "xyz" and the empty value.
	want := []string{"=xyz", "not found", "=", "key group not owned by this subtask", "=xyz@0"}
	if n := get(len(req), 1000, 64); n != 63 {
		t.Fatalf("state_get_many = %d, want 63", n)
	}
	if got := g.results(1000, 5); !slices.Equal(got, want) {
		t.Errorf("results %q, want %q", got, want)
	}
	if lookups := len(g.svc.calls); lookups != 3 {
		t.Errorf("%d lookups %q, want 3: the repeated request and the foreign key need none", lookups, g.svc.calls)
	}
	// Values that do not fit are left out, with their sizes.
	if n := get(len(req), 1000, 62); n != 63 {
		t.Fatalf("out_cap 62: %d, want 63", n)
	}
	if got, want := g.results(1000, 5), []string{"=?3", "not found", "=", "key group not owned by this subtask", "=?3@0"}; !slices.Equal(got, want) {
		t.Errorf("out_cap 62: %q, want %q", got, want)
	}
	if n := get(len(req), 1000, 59); n != abi.StatusLimit {
		t.Errorf("out_cap 59, below the results: %d, want LIMIT", n)
	}
	// The results may overwrite the requests and the keys they point to.
	if n := g.call(phaseProcess, ImportStateGetMany, 0, 2000, uint64(len(req)), 2000, 100); n != 63 {
		t.Fatalf("state_get_many over its requests = %d, want 63", n)
	}
	if got := g.results(2000, 5); !slices.Equal(got, want) {
		t.Errorf("results written over the requests %q, want %q", got, want)
	}
	req = g.getRequests(3000, "abc", "a", "abc", "missing", "k2", "", "foreign", "", "abc", "a")
	g.write(2000, req)
	if n := get(0, 1000, 0); n != 0 {
		t.Errorf("no requests: %d", n)
	}
	if n := get(len(req)-1, 1000, 64); n != abi.StatusBadArgument {
		t.Errorf("a truncated request: %d, want BAD_ARGUMENT", n)
	}
	// A request pointing outside memory is the call's BAD_POINTER.
	bad := slices.Clone(req)
	binary.LittleEndian.PutUint32(bad[16+8:], memEnd-1)
	binary.LittleEndian.PutUint32(bad[16+12:], 2)
	g.write(2500, bad)
	g.svc.logs = nil
	if n := g.call(phaseProcess, ImportStateGetMany, 0, 2500, uint64(len(bad)), 1000, 64); n != abi.StatusBadPointer {
		t.Errorf("a namespace past the end of memory: %d, want BAD_POINTER", n)
	}
	if len(g.svc.logs) != 1 || !strings.Contains(g.svc.logs[0].msg, "request namespace") {
		t.Errorf("logs %+v, want the warning", g.svc.logs)
	}
	// Statuses that do not depend on the key are the call's.
	if n := g.call(phaseProcess, ImportStateGetMany, 9, 2000, uint64(len(req)), 1000, 64); n != abi.StatusBadHandle {
		t.Errorf("handle 9: %d, want BAD_HANDLE", n)
	}
	g.svc.err = operator.ErrNoKeyedState
	if n := get(len(req), 1000, 64); n != abi.StatusNoKeyedState {
		t.Errorf("not keyed: %d, want NO_KEYED_STATE", n)
	}
	g.svc.err = errors.New("disk on fire")
	if n := get(len(req), 1000, 64); n != abi.StatusStateError || g.inst.fatal == nil {
		t.Errorf("backend failure: %d, fatal %v; want STATE_ERROR, kept", n, g.inst.fatal)
	}
	g.svc.err, g.inst.fatal = nil, nil
	// A key or namespace over a lowered limit is that request's LIMIT.
	g.inst.q.keyBytes = 2
	if n := get(len(req), 1000, 64); n != 60 {
		t.Fatalf("lowered key limit: %d", n)
	}
	if got, want := g.results(1000, 5), []string{"limit exceeded", "limit exceeded", "=", "limit exceeded", "limit exceeded@0"}; !slices.Equal(got, want) {
		t.Errorf("lowered key limit: %q, want %q", got, want)
	}
	g.inst.q.keyBytes = operator.MaxKeySize
	if st := g.call(phaseIdle, ImportStateGetMany, 0, 2000, uint64(len(req)), 1000, 64); st != abi.StatusNotInCallback {
		t.Errorf("outside a callback: %d", st)
	}
}

func TestStateGetManyLimit(t *testing.T) {
	g := newBatchRig(t, 32) // 2 MiB
	// Requests for the empty key and namespace.
	req := make([]byte, requestSize*(MaxStateBatchEntries+1))
	g.write(65536, req)
	out := 65536 + uint64(len(req))
	if st := g.call(phaseProcess, ImportStateGetMany, 0, 65536, uint64(len(req)), out, resultSize*(MaxStateBatchEntries+1)); st != abi.StatusLimit {
		t.Fatalf("%d requests: %d, want LIMIT", MaxStateBatchEntries+1, st)
	}
	if len(g.svc.calls) != 0 {
		t.Errorf("a list too long read %d entries", len(g.svc.calls))
	}
	n := MaxStateBatchEntries
	if st := g.call(phaseProcess, ImportStateGetMany, 0, 65536, uint64(requestSize*n), out, uint64(resultSize*n)); st != int32(resultSize*n) {
		t.Fatalf("%d requests: %d, want %d", n, st, resultSize*n)
	}
	// All ask for one entry: one lookup.
	if len(g.svc.calls) != 1 {
		t.Errorf("%d lookups, want 1", len(g.svc.calls))
	}
}

func TestStateWriteBatch(t *testing.T) {
	g := newBatchRig(t, 2)
	batch := func(ws ...write) []byte {
		b := g.stateWrites(3000, ws...)
		g.write(2000, b)
		return b
	}
	ws := batch(
		write{key: "abc", ns: "a", val: "one"},
		write{key: "k2", val: ""},
		write{key: "abc", ns: "b", del: true},
		write{key: "abc", ns: "a", val: "two"},
	)
	g.svc.values[stateKey(0, []byte("abc"), []byte("b"))] = []byte("gone")
	if st := g.call(phaseProcess, ImportStateWriteBatch, 2000, uint64(len(ws))); st != abi.StatusOK {
		t.Fatalf("state_write_batch = %d", st)
	}
	wantCalls := []string{`StatePut "abc" "a" "one"`, `StatePut "k2" "" ""`, `StateDelete "abc" "b"`, `StatePut "abc" "a" "two"`}
	if !slices.Equal(g.svc.calls, wantCalls) {
		t.Errorf("calls %q, want %q", g.svc.calls, wantCalls)
	}
	if v, ok := g.svc.values[stateKey(0, []byte("abc"), []byte("a"))]; !ok || string(v) != "two" {
		t.Errorf("abc/a = %q, %v", v, ok)
	}
	if _, ok := g.svc.values[stateKey(0, []byte("abc"), []byte("b"))]; ok {
		t.Error("abc/b not deleted")
	}
	// Charged as the four state_put and state_delete calls.
	if want := (3 + 1 + 3) + (2 + 0 + 0) + (3 + 1) + (3 + 1 + 3) + 4*StateWriteOverhead; g.inst.stateBytes != want {
		t.Errorf("charged %d state bytes, want %d", g.inst.stateBytes, want)
	}

	// A malformed list, or one pointing outside memory, writes nothing.
	ws = batch(write{key: "x", val: "1"}, write{key: "y", val: "2"})
	minus2 := slices.Clone(ws)
	binary.LittleEndian.PutUint32(minus2[writeSize+24:], 0xfffffffe)
	outside := slices.Clone(ws)
	binary.LittleEndian.PutUint32(outside[writeSize+20:], memEnd)
	for name, b := range map[string][]byte{"truncated": ws[:len(ws)-1], "vlen -2": minus2, "value past the end": outside} {
		g.svc.calls = nil
		g.write(2000, b)
		want := abi.StatusBadArgument
		if name == "value past the end" {
			want = abi.StatusBadPointer
		}
		if st := g.call(phaseProcess, ImportStateWriteBatch, 2000, uint64(len(b))); st != want {
			t.Errorf("%s: %d, want %d", name, st, want)
		}
		if len(g.svc.calls) != 0 {
			t.Errorf("%s: wrote %q", name, g.svc.calls)
		}
	}

	// The first failing write stops the list; those before it stay.
	g.svc.calls = nil
	ws = batch(write{key: "x", val: "1"}, write{key: "foreign", val: "2"}, write{key: "z", val: "3"})
	if st := g.call(phaseProcess, ImportStateWriteBatch, 2000, uint64(len(ws))); st != abi.StatusKeyGroup {
		t.Errorf("a foreign key: %d, want KEY_GROUP", st)
	}
	if want := []string{`StatePut "x" "" "1"`, `StatePut "foreign" "" "2"`}; !slices.Equal(g.svc.calls, want) {
		t.Errorf("calls %q, want %q", g.svc.calls, want)
	}
	ws = batch(write{key: "x", val: "1"}, write{h: 7, key: "y", del: true})
	if st := g.call(phaseProcess, ImportStateWriteBatch, 2000, uint64(len(ws))); st != abi.StatusBadHandle {
		t.Errorf("handle 7: %d, want BAD_HANDLE", st)
	}
	g.inst.q.valueBytes = 2
	g.svc.calls = nil
	ws = batch(write{key: "x", val: "12"}, write{key: "y", val: "123"})
	if st := g.call(phaseProcess, ImportStateWriteBatch, 2000, uint64(len(ws))); st != abi.StatusLimit {
		t.Errorf("a value over the limit: %d, want LIMIT", st)
	}
	if want := []string{`StatePut "x" "" "12"`}; !slices.Equal(g.svc.calls, want) {
		t.Errorf("calls %q, want %q", g.svc.calls, want)
	}
	g.inst.q.valueBytes = operator.MaxValueSize
	if st := g.call(phaseIdle, ImportStateWriteBatch, 2000, uint64(len(ws))); st != abi.StatusNotInCallback {
		t.Errorf("outside a callback: %d", st)
	}
	if st := g.call(phaseNotify, ImportStateWriteBatch, 2000, uint64(len(ws))); st != abi.StatusOK {
		t.Errorf("in checkpoint_complete: %d", st)
	}
}

// refServices is manyServices that gives each pair it answers the ref
// 100 + the pair's index in the call, and takes refs with puts
// (operator.StateRefPutter), as package state does.
type refServices struct{ *foreignServices }

func (m *refServices) StateGetMany(h int32, n int, pair func(int) ([]byte, []byte), fn func(int, []byte, operator.StateRef, error) error) error {
	for j := range n {
		key, ns := pair(j)
		v, err := m.StateGet(h, key, ns, nil)
		if err := fn(j, v, operator.StateRef(100+j), err); err != nil {
			return err
		}
	}
	return nil
}

func (m *refServices) StatePutRef(h int32, key, ns, value []byte, ref operator.StateRef) error {
	m.calls = append(m.calls, fmt.Sprintf("ref %d", ref))
	return m.StatePut(h, key, ns, value)
}

// TestStateWriteBatchRefs checks that a put of state_write_batch carries
// the ref the store gave for its pair in a state_get_many, found by the
// pointers of the request: the same handle, key and namespace pointers and
// lengths. Others, and deletions, go without.
func TestStateWriteBatchRefs(t *testing.T) {
	g := newBatchRigWith(t, 2, func(f *foreignServices) operator.Services { return &refServices{f} })
	if h, err := g.svc.RegisterState("t", abi.StateValue); err != nil || h != 1 {
		t.Fatalf("RegisterState = %d, %v", h, err)
	}
	req := g.getRequests(3000, "abc", "a", "k2", "")
	g.write(2000, req)
	if n := g.call(phaseProcess, ImportStateGetMany, 0, 2000, uint64(len(req)), 1000, 64); n < 0 {
		t.Fatalf("state_get_many = %d", n)
	}
	at := g.layout(3100, "v1", "v2", "v3", "v4")
	var ws []byte
	add := func(h int32, key, ns [2]uint32, val [2]uint32, del bool) {
		ws = binary.LittleEndian.AppendUint32(ws, uint32(h))
		for _, p := range [][2]uint32{key, ns} {
			ws = binary.LittleEndian.AppendUint32(ws, p[0])
			ws = binary.LittleEndian.AppendUint32(ws, p[1])
		}
		vl := val[1]
		if del {
			vl = math.MaxUint32 // -1
		}
		ws = binary.LittleEndian.AppendUint32(ws, val[0])
		ws = binary.LittleEndian.AppendUint32(ws, vl)
	}
	abc, a, k2, none := [2]uint32{3000, 3}, [2]uint32{3003, 1}, [2]uint32{3004, 2}, [2]uint32{3006, 0}
	add(0, abc, a, at[0], false)                // the first pair: ref 100
	add(0, k2, none, at[1], false)              // the second: ref 101
	add(1, abc, a, at[2], false)                // another state
	add(0, [2]uint32{3000, 2}, a, at[3], false) // another key at the same place
	add(0, abc, a, at[0], true)                 // a deletion
	g.write(2500, ws)
	g.svc.calls = nil
	if st := g.call(phaseProcess, ImportStateWriteBatch, 2500, uint64(len(ws))); st != abi.StatusOK {
		t.Fatalf("state_write_batch = %d", st)
	}
	want := []string{
		"ref 100", `StatePut "abc" "a" "v1"`,
		"ref 101", `StatePut "k2" "" "v2"`,
		`StatePut "abc" "a" "v3"`,
		`StatePut "ab" "a" "v4"`,
		`StateDelete "abc" "a"`,
	}
	if !slices.Equal(g.svc.calls, want) {
		t.Errorf("calls %q, want %q", g.svc.calls, want)
	}
}

func TestStateWriteBatchLimits(t *testing.T) {
	g := newBatchRig(t, 32)
	ws := make([]byte, writeSize*(MaxStateBatchEntries+1)) // puts of empty values for the empty key
	g.write(65536, ws)
	if st := g.call(phaseProcess, ImportStateWriteBatch, 65536, uint64(len(ws))); st != abi.StatusLimit {
		t.Errorf("%d writes: %d, want LIMIT", MaxStateBatchEntries+1, st)
	}
	if len(g.svc.calls) != 0 {
		t.Errorf("a list too long wrote %d entries", len(g.svc.calls))
	}
	if st := g.call(phaseProcess, ImportStateWriteBatch, 65536, uint64(len(ws)-writeSize)); st != abi.StatusOK {
		t.Errorf("%d writes: %d, want OK", MaxStateBatchEntries, st)
	}

	// The state quota stops the call at the write that exceeds it.
	g.inst.q.stateBytes = 3 * StateWriteOverhead
	g.svc.calls = nil
	ws = g.stateWrites(3000, write{key: "a", val: "1"}, write{key: "b", val: "2"}, write{key: "c", val: "3"})
	g.write(2000, ws)
	fn := g.inst.api.ExportedFunction("t_" + ImportStateWriteBatch)
	g.inst.stack[0], g.inst.stack[1] = 2000, uint64(len(ws))
	_, err := g.inst.call(g.s, phaseProcess, g.out, fn, "t_"+ImportStateWriteBatch, 2)
	var qe *QuotaError
	if !errors.As(err, &qe) || !strings.Contains(err.Error(), "max-state-bytes-per-call") {
		t.Fatalf("over the state quota: %v, want the quota error", err)
	}
	if want := []string{`StatePut "a" "" "1"`, `StatePut "b" "" "2"`}; !slices.Equal(g.svc.calls, want) {
		t.Errorf("calls %q, want %q", g.svc.calls, want)
	}
}

// TestStateBatchMatchesSingleCalls runs random reads and writes against
// two vertices of a real state store, one through state_get, state_put and
// state_delete, the other through state_get_many and state_write_batch,
// and requires the same statuses, values and state.
func TestStateBatchMatchesSingleCalls(t *testing.T) {
	store, err := state.Open(state.Options{Dir: t.TempDir(), MaxParallelism: 128, KeyGroups: abi.RangeForSubtask(3, 4, 128)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	type side struct {
		g   *rig
		svc *realServices
	}
	open := func(id string) side {
		g := &rig{t: t, logs: &logSink{}, out: &fakeCollector{}}
		r := newTestRuntime(t, Config{Log: g.logs.log})
		m := compileWAT(t, r, moduleWAT(map[string]string{abi.ExportMemory: `(memory (export "memory") 8)`}, trampolinesWAT()))
		g.inst = newInstance(t, m)
		g.s = g.inst.Operator().(*slot)
		svc := &realServices{VertexState: store.Vertex(id, true)}
		if err := g.s.Open(testSpec(), svc); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"a", "b"} {
			if _, err := svc.RegisterState(name, abi.StateValue); err != nil {
				t.Fatal(err)
			}
		}
		return side{g, svc}
	}
	single, batched := open("single"), open("batched")
	// Keys of subtask 3 of 4 (key groups 96..127) and of others.
	keys := []string{"", "w1", "w8", "w2", "w7", "sensor-1", "a", "hello", strings.Repeat("k", 70000)}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		// Reads: one state_get_many against as many state_get calls.
		var pairs []string
		var want []string
		seen := map[string]int{}
		for j := range rng.IntN(6) {
			k, ns := keys[rng.IntN(len(keys))], fmt.Sprint(rng.IntN(3))
			pairs = append(pairs, k, ns)
			single.g.write(0x10000, []byte(k+ns))
			st := single.g.call(phaseProcess, abi.ImportStateGet, 0, 0x10000, uint64(len(k)), 0x10000+uint64(len(k)), uint64(len(ns)), 0x30000, 256)
			w := abi.StatusText(st)
			if st >= 0 {
				w = "=" + string(single.g.read(0x30000, uint32(st)))
			}
			if f, ok := seen[k+"\x00"+ns]; ok {
				w += fmt.Sprintf("@%d", f)
			} else {
				seen[k+"\x00"+ns] = j
			}
			want = append(want, w)
		}
		req := batched.g.getRequests(0x20000, pairs...)
		batched.g.write(0x10000, req)
		if n := batched.g.call(phaseProcess, ImportStateGetMany, 0, 0x10000, uint64(len(req)), 0x30000, 0x10000); n < 0 {
			t.Fatalf("round %d: state_get_many = %d", round, n)
		}
		if got := batched.g.results(0x30000, len(want)); !slices.Equal(got, want) {
			t.Fatalf("round %d: state_get_many %q, state_get %q", round, got, want)
		}

		// Writes: one state_write_batch against as many single calls; the
		// list stops where a single call fails.
		var ws []write
		wantSt, charged := abi.StatusOK, 0
		for range rng.IntN(6) {
			w := write{h: int32(rng.IntN(3)), key: keys[rng.IntN(len(keys))], ns: fmt.Sprint(rng.IntN(3)), val: fmt.Sprint(round), del: rng.IntN(3) == 0}
			ws = append(ws, w)
			single.g.write(0x10000, []byte(w.key+w.ns+w.val))
			var st int32
			if w.del {
				st = single.g.call(phaseProcess, abi.ImportStateDelete, uint64(w.h), 0x10000, uint64(len(w.key)), 0x10000+uint64(len(w.key)), uint64(len(w.ns)))
			} else {
				st = single.g.call(phaseProcess, abi.ImportStatePut, uint64(w.h), 0x10000, uint64(len(w.key)), 0x10000+uint64(len(w.key)), uint64(len(w.ns)),
					0x10000+uint64(len(w.key)+len(w.ns)), uint64(len(w.val)))
			}
			charged += single.g.inst.stateBytes
			if st != abi.StatusOK {
				wantSt = st
				break
			}
		}
		b := batched.g.stateWrites(0x20000, ws...)
		batched.g.write(0x10000, b)
		if st := batched.g.call(phaseProcess, ImportStateWriteBatch, 0x10000, uint64(len(b))); st != wantSt {
			t.Fatalf("round %d: state_write_batch = %d, the single calls %d", round, st, wantSt)
		}
		if batched.g.inst.stateBytes != charged {
			t.Fatalf("round %d: charged %d state bytes, the single calls %d", round, batched.g.inst.stateBytes, charged)
		}
	}
	// Both vertices hold the same entries.
	for _, k := range keys {
		for h := range int32(2) {
			for ns := range 3 {
				a, errA := single.svc.StateGet(h, []byte(k), []byte(fmt.Sprint(ns)), nil)
				b, errB := batched.svc.StateGet(h, []byte(k), []byte(fmt.Sprint(ns)), nil)
				if string(a) != string(b) || operator.Status(errA) != operator.Status(errB) {
					t.Errorf("state %d key %.10q ns %d: single %q %v, batched %q %v", h, k, ns, a, errA, b, errB)
				}
			}
		}
	}
}

type realServices struct{ *state.VertexState }

func (realServices) Watermark() int64      { return abi.MinWatermark }
func (realServices) ProcessingTime() int64 { return 1 }
func (realServices) Log(int32, string)     {}

// TestStateBatchInstanceContext checks that the batched functions need a
// callback of an instance: the context's instance is what they act on.
func TestStateBatchInstanceContext(t *testing.T) {
	for _, f := range []struct {
		name string
		fn   func(context.Context, []uint64)
	}{
		{ImportStateGetMany, func(ctx context.Context, s []uint64) { hostStateGetMany(ctx, nil, s) }},
		{ImportStateWriteBatch, func(ctx context.Context, s []uint64) { hostStateWriteBatch(ctx, nil, s) }},
	} {
		stack := make([]uint64, 5)
		f.fn(context.Background(), stack)
		if st := int32(uint32(stack[0])); st != abi.StatusNotInCallback {
			t.Errorf("%s without an instance: %d", f.name, st)
		}
	}
}

// TestABIv1ModulesUnchanged runs the wordcount "count" operator of modules
// that import none of the batched functions (the WAT example, written
// against the raw ABI, and the C example built without the SDK's state
// cache) next to the C example built with it, over real state, through a
// checkpoint and a restore: they must emit the same counts.
func TestABIv1ModulesUnchanged(t *testing.T) {
	wat, err := testmod.BuildWAT(testmod.WATDir + "/wordcount.wat")
	if err != nil {
		t.Fatal(err)
	}
	cV1, err := testmod.BuildCFlags("examples/wasm/c/wordcount", "-DWSTREAM_UNBATCHED_STATE")
	if err != nil {
		t.Fatal(err)
	}
	cBatched, err := testmod.BuildC("examples/wasm/c/wordcount")
	if err != nil {
		t.Fatal(err)
	}
	var batches [][]byte
	for i := range 6 {
		var b abi.Builder
		for j := range 300 {
			b.Add(0, int64(j), fmt.Appendf(nil, "w%d", (i*7+j*13)%50), nil)
		}
		batches = append(batches, bytes.Clone(b.Bytes()))
	}
	ctx := context.Background()
	r := newTestRuntime(t, Config{})
	var outs []string
	for _, mod := range []struct {
		path    string
		batched bool
	}{{wat, false}, {cV1, false}, {cBatched, true}} {
		code, err := os.ReadFile(mod.path)
		if err != nil {
			t.Fatal(err)
		}
		m, err := r.Compile(ctx, filepath.Base(mod.path), code)
		if err != nil {
			t.Fatal(err)
		}
		imports := map[string]bool{}
		plain := wazero.NewRuntime(ctx)
		cm, err := plain.CompileModule(ctx, code)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range cm.ImportedFunctions() {
			_, name, _ := f.Import()
			imports[name] = true
		}
		_ = plain.Close(ctx)
		if imports[ImportStateGetMany] != mod.batched || imports[ImportStateWriteBatch] != mod.batched {
			t.Fatalf("%s imports state_get_many %v, state_write_batch %v; want %v", mod.path,
				imports[ImportStateGetMany], imports[ImportStateWriteBatch], mod.batched)
		}
		// Half the batches, a checkpoint, then the rest on a restored store
		// and a new instance, and the end of input.
		run := func(dir string, batches [][]byte, end bool) string {
			store, err := state.Open(state.Options{Dir: dir, MaxParallelism: 128, KeyGroups: abi.KeyGroupRange{Start: 0, End: 127}})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			inst, err := m.NewInstance(ctx, "count/0")
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Close(ctx)
			op := inst.Operator()
			svc := &realServices{VertexState: store.Vertex("count", true)}
			if err := op.Open(operator.Spec{VertexID: "count", Operator: "count", Parallel: 1, MaxParallelism: 128, Keyed: true}, svc); err != nil {
				t.Fatal(err)
			}
			out := &fakeCollector{}
			for _, b := range batches {
				if err := op.Process(b, out); err != nil {
					t.Fatal(err)
				}
			}
			if !end {
				if err := store.Checkpoint(dir + ".checkpoint"); err != nil {
					t.Fatal(err)
				}
				return ""
			}
			var fired abi.Builder
			if _, err := svc.PopTimers(abi.TimeEvent, abi.MaxWatermark, &fired); err != nil {
				t.Fatal(err)
			}
			if err := op.OnTimers(fired.Bytes(), out); err != nil {
				t.Fatal(err)
			}
			return out.String()
		}
		dir := filepath.Join(t.TempDir(), "state")
		run(dir, batches[:3], false)
		outs = append(outs, run(dir+".checkpoint", batches[3:], true))
	}
	if outs[0] == "" || outs[0] != outs[1] || outs[1] != outs[2] {
		t.Errorf("the counts differ:\nWAT\n%s\nC without the cache\n%s\nC with it\n%s", outs[0], outs[1], outs[2])
	}
}

// FuzzStateBatch calls state_get_many and state_write_batch with arbitrary
// lists (their pairs pointing anywhere in and out of guest memory) and
// buffers: the host must not panic, must return an ABI status, write guest
// memory only inside out, and answer every request of a call it accepts
// with a result that names an earlier or its own request and points inside
// out.
func FuzzStateBatch(f *testing.F) {
	f.Add([]byte{}, uint32(0), uint32(64))
	f.Add(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(make([]byte, 0, 16), 3000), 3), uint32(100), uint32(64))
	f.Add(bytes.Repeat([]byte{0xff}, 28), uint32(1), uint32(5))
	f.Add(make([]byte, 56), uint32(2), uint32(40))
	g := newBatchRig(f, 2)
	g.svc.values[stateKey(0, []byte("abc"), nil)] = []byte("xyz")
	g.inst.mem.Write(3000, []byte("abc"))
	f.Fuzz(func(t *testing.T, list []byte, ptrs, outCap uint32) {
		if len(list) > 4096 {
			return
		}
		g.t = t
		// The list's pairs point at the data at 3000 or at arbitrary places.
		for j := 0; j+8 <= len(list); j += 8 {
			if ptrs>>(j%32)&1 == 1 {
				binary.LittleEndian.PutUint32(list[j:], 3000)
			}
		}
		g.write(8192, list)
		out := uint64(16384)
		before := bytes.Clone(g.read(0, memEnd))
		st := g.call(phaseProcess, ImportStateGetMany, 0, 8192, uint64(len(list)), out, uint64(outCap%8192))
		after := g.read(0, memEnd)
		for j := range before {
			if before[j] != after[j] && (uint64(j) < out || uint64(j) >= out+uint64(outCap%8192)) {
				t.Fatalf("state_get_many wrote byte %d, outside out", j)
			}
		}
		if st >= 0 {
			n := len(list) / requestSize
			tab := g.read(uint32(out), uint32(resultSize*n))
			for j := range n {
				first := binary.LittleEndian.Uint32(tab[resultSize*j:])
				vlen := int32(binary.LittleEndian.Uint32(tab[resultSize*j+4:]))
				vptr := uint64(binary.LittleEndian.Uint32(tab[resultSize*j+8:]))
				if first > uint32(j) || vptr != 0 && (vptr < out || vptr+uint64(max(vlen, 0)) > out+uint64(outCap%8192)) {
					t.Fatalf("result %d: first %d, vlen %d, vptr %#x", j, first, vlen, vptr)
				}
			}
		} else if abi.StatusText(st) == "status "+fmt.Sprint(st) {
			t.Fatalf("state_get_many returned %d, not an ABI status", st)
		}
		if st := g.call(phaseProcess, ImportStateWriteBatch, 8192, uint64(len(list))); st > 0 || abi.StatusText(st) == "status "+fmt.Sprint(st) {
			t.Fatalf("state_write_batch returned %d", st)
		}
	})
}

// TestStateRefsKeepCall checks that the refs of the state_get_many calls
// of the SDKs' 256 pairs (keys one after the other in a batch, as the
// SDKs' requests point at them) are found when their puts come: in request
// order, in reverse order, and interleaved with another call's, the newest
// call's ref for pointers an older call used too, none for another state,
// and that a log past its bound keeps the newest calls.
func TestStateRefsKeepCall(t *testing.T) {
	var i Instance
	refs := i.stateRefs()
	pair := func(call, j int) (key, ns uint64) {
		return uint64(70_000+call%3*5_000+j*19) | 7<<32, 65_000 | 5<<32
	}
	ref := func(call, j int) operator.StateRef { return operator.StateRef(call<<16 | j + 1) }
	check := func(call, j int) {
		t.Helper()
		key, ns := pair(call, j)
		if got := refs.get(3, key, ns); got != ref(call, j) {
			t.Fatalf("call %d pair %d: ref %#x, want %#x", call, j, got, ref(call, j))
		}
	}
	for call := range 20 {
		// Two calls (one of another state), then their puts.
		refs.begin(256)
		for j := range 256 {
			key, ns := pair(call, j)
			refs.put(3, key, ns, ref(call, j))
		}
		refs.begin(1)
		refs.put(4, 1, 2, 99)
		switch call % 3 {
		case 0:
			for j := range 256 {
				check(call, j)
			}
		case 1:
			for j := 255; j >= 0; j-- {
				check(call, j)
			}
		default:
			for j := range 128 {
				check(call, j)
				check(call, 255-j)
			}
		}
		if key, ns := pair(call, 0); refs.get(4, key, ns) != 0 {
			t.Errorf("call %d: a ref found for another state", call)
		}
		if refs.get(4, 1, 2) != 99 || refs.get(3, 1, 2) != 0 {
			t.Errorf("call %d: the other state's ref not found, or found for state 3", call)
		}
		if len(refs.log) > stateRefKeep {
			t.Fatalf("call %d: log of %d refs", call, len(refs.log))
		}
	}
}
