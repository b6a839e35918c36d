package wstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/wstream/wstream/abi"
)

// module is the state of the module instance: the host creates one instance
// per subtask and calls it from one thread, so one value serves every slot.
// progress is the index of the record or timer the running batch callback
// is at, noProgress between records; the host reads it when a callback
// fails (progress_at, abi/ABI.md).
var progress uint32 = noProgress

const noProgress = 0xFFFFFFFF

type module struct {
	factories map[string]func() Operator
	plan      []byte
	// migrations convert values of states whose layout changed
	// (RegisterMigration); migrated holds the last converted value until
	// the host copied it.
	migrations map[migrationKey]MigrateFunc
	migrated   []byte

	// arena is where the host writes call arguments (wstream_alloc). It is
	// replaced only by a larger one, when the host asks for more room.
	arena []byte

	slots []*slot

	// progressNamed: progress_at was called (at the first open).
	progressNamed bool

	// out collects the records emitted during one callback as an abi batch
	// (outN records after a 4-byte count), for one emit_batch call; emitErr
	// is the first emit failure of the callback.
	out     []byte
	outN    uint32
	emitErr error
}

type slot struct {
	op  Operator
	ctx *Context
}

var mod module

// maxSlots bounds operator slots: a chain has a handful of operators, and a
// wild slot number must not make the SDK allocate a table for it.
const maxSlots = 1 << 12

// panicOut receives the stack of a recovered panic: stderr, which the host
// quotes in the job's failure.
var panicOut io.Writer = os.Stderr

// alloc returns an arena of at least size bytes (never empty, so that it
// has an address), reusing the current one when it is large enough.
func (m *module) alloc(size int32) []byte {
	if size < 0 {
		return nil
	}
	if int(size) > len(m.arena) || len(m.arena) == 0 {
		// Grow geometrically so that a host growing batches step by step
		// does not reallocate on every step.
		m.arena = make([]byte, max(int(size), 2*len(m.arena), 64<<10))
	}
	return m.arena
}

// region resolves a (ptr, len) pair that the host passed into the arena,
// whose first byte is at address base. An empty region is valid anywhere.
func (m *module) region(base uint64, ptr uint32, n int32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	if n < 0 || uint64(ptr) < base {
		return nil, false
	}
	off := uint64(ptr) - base
	end := off + uint64(n)
	if end > uint64(len(m.arena)) {
		return nil, false
	}
	return m.arena[off:end:end], true
}

// badPointer reports a region outside the arena: the host broke the
// buffer-ownership rule of the ABI.
func badPointer(export string, p uint32, n int32, arena int) int32 {
	hostFail(fmt.Sprintf("%s: region [%#x, +%d) lies outside the %d-byte argument arena returned by wstream_alloc", export, p, n, arena))
	return abi.StatusBadPointer
}

func (m *module) slot(op int32) *slot {
	if op < 0 || int(op) >= len(m.slots) {
		return nil
	}
	return m.slots[op]
}

func (m *module) open(op int32, name, cfg []byte) (status int32) {
	if op < 0 || op >= maxSlots {
		hostFail(fmt.Sprintf("wstream_open: operator slot %d is outside [0, %d)", op, maxSlots))
		return abi.StatusBadHandle
	}
	if m.slot(op) != nil {
		hostFail(fmt.Sprintf("wstream_open: operator slot %d is already open (operator %q)", op, m.slots[op].ctx.name))
		return abi.StatusBadHandle
	}
	factory, ok := m.factories[string(name)]
	if !ok {
		hostFail(fmt.Sprintf("wstream_open: the module has no operator %q; it has %q", name, operatorNames()))
		return abi.StatusUnknownOp
	}
	if !m.progressNamed {
		// Where the host finds which record a failed callback was at
		// (progress_at): dead-letter mode then needs no search.
		m.progressNamed = true
		hostProgressAt(&progress)
	}
	s := &slot{ctx: newContext(string(name), cfg)}
	defer m.recoverInto(s, "open", &status)
	m.begin(s)
	s.ctx.opening = true
	s.op = factory()
	if s.op == nil {
		return m.fail(s, "open", errors.New("the registered factory returned a nil Operator"))
	}
	err := s.op.Open(s.ctx)
	s.ctx.opening = false
	if st := m.end(s, "open", err); st != abi.StatusOK {
		return st
	}
	for int(op) >= len(m.slots) {
		m.slots = append(m.slots, nil)
	}
	m.slots[op] = s
	m.warm(s)
	return abi.StatusOK
}

// warm allocates the buffers of the callbacks while the operator opens,
// at the sizes a batch of about a thousand short records needs, rather
// than in its first callback. A host in dead-letter mode saves the
// instance right after open and puts it back there after each trap:
// buffers first made in a callback would be made again, and the Go heap
// grown again, in the first callback after every trap (0.05-0.1 ms,
// BenchmarkFirstCallAfterReset in package host). A stateless operator gets
// no state cache.
func (m *module) warm(s *slot) {
	if cap(m.out) == 0 {
		m.growOut(firstOut)
	}
	sc := &s.ctx.sc
	if !batchedState || len(s.ctx.states) == 0 || sc.mem != nil {
		return
	}
	sc.groups = make([]group, 0, maxGroups)
	sc.dirty = make([]uint32, 0, chunk)
	sc.list = make([]byte, 0, writeSize*chunk)
	sc.grow(warmChunk)
}

func (m *module) process(op int32, batch []byte) (status int32) {
	s := m.slot(op)
	if s == nil {
		return noSlot("wstream_process", op)
	}
	defer m.recoverInto(s, "process", &status)
	it, err := newBatchIter(batch)
	if err != nil {
		return m.badBatch(s, "input", err)
	}
	m.begin(s)
	if err := m.records(s, &it, m.firstCommit()); err != nil {
		return m.fail(s, "process", err)
	}
	progress = noProgress // a failure from here on is no record's
	if err := it.err(); err != nil {
		m.resetOut()
		return m.badBatch(s, "input", err)
	}
	return m.end(s, "process", nil)
}

// records calls Process for each record of it, until the end of the batch,
// a malformed record or an error of the operator (returned with the
// record's index and key), marking a commit point before record next and
// then as the host asks (commit). It is the per-record loop, apart from
// process for the compiler's sake: a function without defer and with few
// live values keeps them in wasm locals. It decodes records itself rather
// than through batchIter.next: on wasm a Go call costs tens of
// nanoseconds.
func (m *module) records(s *slot, it *batchIter, next int) error {
	proc, ctx := s.op, s.ctx
	b, off, left, i := it.b, it.off, it.left, it.i
	ctx.sc.in, ctx.sc.n = b, i+int(left)
	for ; left > 0; left-- {
		if i == next {
			var err error
			if next, err = m.commit(s, i); err != nil {
				return err
			}
		}
		d := b[off:]
		if len(d) < abi.RecordHeaderSize {
			break
		}
		kl := uint64(binary.LittleEndian.Uint32(d[12:]))
		vl := uint64(binary.LittleEndian.Uint32(d[16:]))
		if kl+vl > uint64(len(d)-abi.RecordHeaderSize) {
			break
		}
		k := abi.RecordHeaderSize + int(kl)
		e := k + int(vl)
		key := d[abi.RecordHeaderSize:k:k]
		ctx.sc.off, ctx.sc.kl = off, int(kl)
		progress = uint32(i)
		if err := proc.Process(ctx, Record{Key: key, Value: d[k:e:e], Timestamp: int64(binary.LittleEndian.Uint64(d[4:])), Input: int(binary.LittleEndian.Uint32(d))}); err != nil {
			return fmt.Errorf("record %d of %d (key %s): %w", i, abi.Count(b), abbreviate(key), err)
		}
		off += e
		i++
	}
	it.off, it.left, it.i = off, left, i
	return nil
}

func (m *module) onTimer(op int32, batch []byte) (status int32) {
	s := m.slot(op)
	if s == nil {
		return noSlot("wstream_on_timer", op)
	}
	defer m.recoverInto(s, "on_timer", &status)
	it, err := newBatchIter(batch)
	if err != nil {
		return m.badBatch(s, "timer", err)
	}
	th, ok := s.op.(TimerHandler)
	if !ok {
		if it.left == 0 {
			return abi.StatusOK
		}
		return m.fail(s, "on_timer", fmt.Errorf("%d timers fired but %T does not implement wstream.TimerHandler", it.left, s.op))
	}
	m.begin(s)
	var rec abi.Record
	s.ctx.sc.in, s.ctx.sc.n = it.b, int(it.left)
	next := m.firstCommit()
	for {
		if it.i == next && it.left > 0 {
			if next, err = m.commit(s, it.i); err != nil {
				return m.fail(s, "on_timer", err)
			}
		}
		s.ctx.sc.off = it.off
		i := it.i
		if !it.next(&rec) {
			break
		}
		s.ctx.sc.kl = len(rec.Key)
		progress = uint32(i)
		err = th.OnTimer(s.ctx, Timer{Domain: TimeDomain(rec.Port), Timestamp: rec.Timestamp, Key: rec.Key, Namespace: rec.Value})
		if err != nil {
			return m.fail(s, "on_timer", fmt.Errorf("%s timer at %d (key %s): %w", TimeDomain(rec.Port), rec.Timestamp, abbreviate(rec.Key), err))
		}
	}
	progress = noProgress
	if err := it.err(); err != nil {
		m.resetOut()
		return m.badBatch(s, "timer", err)
	}
	return m.end(s, "on_timer", nil)
}

// firstCommit asks the host where the batch callback starting should mark
// its first commit point (commit, abi/ABI.md): the index of a record, or -1
// for none.
func (m *module) firstCommit() int {
	if st := hostCommit(0); st > 0 {
		return int(st)
	}
	return -1
}

// commit marks a commit point before record (or timer) i: the work of the
// records before it goes to the host, its cached state written back and
// its output emitted, and the host keeps it should the callback fail
// later (dead-letter mode then runs again only the records after it). It
// returns the index of the next commit point the host asks for, or -1.
func (m *module) commit(s *slot, i int) (int, error) {
	progress = noProgress // a failure in here is no record's
	if err := s.ctx.flushState(); err != nil {
		return -1, fmt.Errorf("commit point before record %d: %w", i, err)
	}
	if s.ctx.sc.err != nil {
		return -1, fmt.Errorf("commit point before record %d: %w", i, s.ctx.sc.err)
	}
	if err := m.flush(); err != nil {
		return -1, fmt.Errorf("commit point before record %d: %w", i, err)
	}
	st := hostCommit(uint32(i))
	if st < 0 {
		return -1, fmt.Errorf("commit point before record %d: %w", i, statusErr(st))
	}
	if st == 0 {
		return -1, nil
	}
	return i + int(st), nil
}

func (m *module) close(op int32) (status int32) {
	s := m.slot(op)
	if s == nil {
		return noSlot("wstream_close", op)
	}
	// The slot is gone whatever Close does: the host never calls it again.
	m.slots[op] = nil
	defer m.recoverInto(s, "close", &status)
	m.begin(s)
	var err error
	if c, ok := s.op.(Closer); ok {
		err = c.Close(s.ctx)
	}
	return m.end(s, "close", err)
}

// Checkpoint hooks, numbered for checkpoint.
const (
	hookPreBarrier = iota
	hookComplete
	hookAborted
)

var hookNames = [...]string{"pre_barrier", "checkpoint_complete", "checkpoint_aborted"}

func (m *module) checkpoint(hook int, op int32, id int64) (status int32) {
	s := m.slot(op)
	if s == nil {
		return noSlot("wstream_"+hookNames[hook], op)
	}
	cl, ok := s.op.(CheckpointListener)
	if !ok {
		return abi.StatusOK
	}
	defer m.recoverInto(s, hookNames[hook], &status)
	m.begin(s)
	var err error
	switch hook {
	case hookPreBarrier:
		err = cl.PreBarrier(s.ctx, id)
	case hookComplete:
		err = cl.CheckpointComplete(s.ctx, id)
	default:
		err = cl.CheckpointAborted(s.ctx, id)
	}
	if err != nil {
		err = fmt.Errorf("checkpoint %d: %w", id, err)
	}
	return m.end(s, hookNames[hook], err)
}

func (m *module) begin(s *slot) {
	s.ctx.begin()
	m.resetOut()
	m.emitErr = nil
}

// end finishes a callback: it reports err, or else hands the buffered output
// to the host.
func (m *module) end(s *slot, phase string, err error) int32 {
	// The cached writes reach the host whether the callback succeeds or
	// fails, as the unbatched calls would have.
	serr := s.ctx.endState()
	if err != nil {
		return m.fail(s, phase, err)
	}
	if serr != nil {
		return m.fail(s, phase, serr)
	}
	if err := m.flush(); err != nil {
		return m.fail(s, phase, err)
	}
	return abi.StatusOK
}

// emit appends one record to the output buffer: it is the per-record path,
// one capacity check and two copies. A buffer past the threshold goes to
// the host first, so that what reserve returned stays valid until the next
// emit.
func (m *module) emit(port uint32, key, value []byte, ts int64) {
	if m.emitErr != nil {
		return
	}
	n := len(m.out)
	if n >= flushThreshold {
		if m.setEmitErr(m.flush()); m.emitErr != nil {
			return
		}
		n = 0
	}
	if n == 0 {
		n = abi.BatchHeaderSize
	}
	k := n + abi.RecordHeaderSize
	end := k + len(key) + len(value)
	if end > cap(m.out) {
		m.growOut(end)
	}
	b := m.out[:end]
	binary.LittleEndian.PutUint32(b[n:], port)
	binary.LittleEndian.PutUint64(b[n+4:], uint64(ts))
	binary.LittleEndian.PutUint32(b[n+12:], uint32(len(key)))
	binary.LittleEndian.PutUint32(b[n+16:], uint32(len(value)))
	put(b[k:], key)
	put(b[k+len(key):], value)
	m.out = b
	m.outN++
}

// reserve is emit for a value that the caller writes: it appends the
// record with vl value bytes left as they are and returns them. After an
// emit failure, which fails the callback, the record goes to a buffer that
// is dropped, so that the caller can still write it.
func (m *module) reserve(port int, key []byte, vl int, ts int64) []byte {
	if port < 0 || vl < 0 {
		m.setEmitErr(fmt.Errorf("EmitReserve: negative output index %d or value length %d", port, vl))
		port, vl = 0, max(vl, 0)
	}
	n := len(m.out)
	if n >= flushThreshold && m.emitErr == nil {
		m.setEmitErr(m.flush())
		n = 0
	}
	if m.emitErr != nil {
		m.resetOut()
		n = 0
	}
	if n == 0 {
		n = abi.BatchHeaderSize
	}
	k := n + abi.RecordHeaderSize
	v := k + len(key)
	end := v + vl
	if end > cap(m.out) {
		m.growOut(end)
	}
	b := m.out[:end]
	binary.LittleEndian.PutUint32(b[n:], uint32(port))
	binary.LittleEndian.PutUint64(b[n+4:], uint64(ts))
	binary.LittleEndian.PutUint32(b[n+12:], uint32(len(key)))
	binary.LittleEndian.PutUint32(b[n+16:], uint32(vl))
	put(b[k:], key)
	m.out = b
	m.outN++
	return b[v:end:end]
}

// put copies src to the start of dst. An empty src (a record without a
// key) makes no call: copy always calls memmove, and a call costs on wasm.
func put(dst, src []byte) {
	if len(src) > 0 {
		copy(dst, src)
	}
}

func (m *module) growOut(size int) {
	b := make([]byte, len(m.out), max(size, 2*cap(m.out), 4<<10))
	copy(b, m.out)
	m.out = b
}

func (m *module) resetOut() {
	m.out = m.out[:0]
	m.outN = 0
}

func (m *module) setEmitErr(err error) {
	if m.emitErr == nil {
		m.emitErr = err
	}
}

// flush hands the buffered output to the host in one emit_batch call.
func (m *module) flush() error {
	if m.emitErr != nil {
		return m.emitErr
	}
	if m.outN == 0 {
		return nil
	}
	n := m.outN
	binary.LittleEndian.PutUint32(m.out, n)
	st := hostEmitBatch(m.out)
	m.resetOut()
	if st < 0 {
		m.emitErr = fmt.Errorf("emitting %d records: %w", n, statusErr(st))
		return m.emitErr
	}
	return nil
}

// fail reports err through the host's fail call, drops the callback's
// buffered output and returns GUEST_ERROR.
func (m *module) fail(s *slot, phase string, err error) int32 {
	m.resetOut()
	_ = s.ctx.endState()
	hostFail(fmt.Sprintf("operator %q: %s: %v", s.ctx.name, phase, err))
	return abi.StatusGuestError
}

// recoverInto turns a panic of the operator into a failure of the callback,
// with the panic value as the message and the stack on stderr.
func (m *module) recoverInto(s *slot, phase string, status *int32) {
	r := recover()
	if r == nil {
		return
	}
	s.ctx.opening = false
	fmt.Fprintf(panicOut, "wstream: operator %q panicked in %s: %v\n%s", s.ctx.name, phase, r, debug.Stack())
	*status = m.fail(s, phase, fmt.Errorf("panic: %v", r))
}

func (m *module) badBatch(s *slot, what string, err error) int32 {
	_ = s.ctx.endState()
	hostFail(fmt.Sprintf("operator %q: %s batch from the host: %v", s.ctx.name, what, err))
	return abi.StatusBadArgument
}

func noSlot(export string, op int32) int32 {
	hostFail(fmt.Sprintf("%s: operator slot %d is not open", export, op))
	return abi.StatusBadHandle
}
