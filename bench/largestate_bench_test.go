package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/internal/testkit/natstest"
	"github.com/wstream/wstream/state"
)

// BenchmarkLargeState measures what checkpoints, restores and rescales of a
// worker's keyed state cost as the state grows, beside the physical
// references measured in the same run. Per state size (megabytes of
// 100-byte values; WSTREAM_LARGE_STATE_MB=a,b,…, default 10,20; issue 36's
// run is 20,2000: 20M keys), a worker's two subtasks (parallelism 2, one
// store each on the default state memory budget) are filled with random,
// incompressible values, and checkpointed in full. Then
// WSTREAM_LARGE_STATE_ROUNDS intervals (default 3) each change
// WSTREAM_LARGE_STATE_CHANGE random keys (default 100,000, the same at
// every size, so that only the state's size differs) and take an
// incremental checkpoint as a subtask does: the sync phase
// (state.Store.Checkpoint) and the async phase (every file of it put as a
// shared file, as worker.uploadIncremental does). From the last one:
//
//   - restore-local: checkpoint.Storage.Restore of both subtasks from a
//     filesystem storage and state.Open, against `cp` of the same files;
//   - restore-obj: the same from the NATS object store, against raw gets of
//     the same objects (as many at a time as Restore reads);
//   - rescale: parallelism 2→4, every new subtask restoring its old
//     subtask's files and importing its key groups
//     (state.Store.ImportStore), against restore-local;
//   - Pebble's own random point reads and writes of the same keys in the
//     restored state.
//
// It reports per size the sync phase, the async phase, uploaded and changed
// bytes, restore, rescale and reference times, and the process's peak RSS
// during the restores; and the ratios against the smallest size.
func BenchmarkLargeState(b *testing.B) {
	sizes := envInts(b, "WSTREAM_LARGE_STATE_MB", []int{10, 20})
	rounds := envInts(b, "WSTREAM_LARGE_STATE_ROUNDS", []int{3})[0]
	change := envInts(b, "WSTREAM_LARGE_STATE_CHANGE", []int{100_000})[0]
	_, js := natstest.Start(b)
	results := map[int]largeResult{}
	for _, mb := range sizes {
		b.Run(fmt.Sprintf("state=%dMB", mb), func(b *testing.B) {
			r := largeStateRun(b, js, mb, rounds, change)
			results[mb] = r
			r.report(b)
		})
	}
	b.Run("ratios", func(b *testing.B) {
		base, ok := results[sizes[0]]
		if !ok {
			return
		}
		for _, mb := range sizes[1:] {
			r, ok := results[mb]
			if !ok {
				continue
			}
			at := fmt.Sprintf("@%dMB", mb)
			b.ReportMetric(r.sync.Seconds()/base.sync.Seconds(), "sync"+at+"/sync@"+strconv.Itoa(sizes[0])+"MB")
			b.ReportMetric(float64(r.uploaded)/float64(r.changed), "uploaded/changed"+at)
			b.ReportMetric(r.restoreLocal.Seconds()/r.cp.Seconds(), "restore-local/cp"+at)
			b.ReportMetric(r.restoreObj.Seconds()/r.rawGet.Seconds(), "restore-obj/raw-get"+at)
			b.ReportMetric(r.rescale.Seconds()/r.restoreLocal.Seconds(), "rescale/restore"+at)
		}
	})
}

// envInts reads a comma-separated list of positive numbers from the
// environment variable name, def when it is unset.
func envInts(b *testing.B, name string, def []int) []int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.ReplaceAll(f, "_", ""))
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want positive numbers, comma-separated", name, s)
		}
		out = append(out, n)
	}
	return out
}

// largeResult is one size's figures. sync, async, uploaded and changed are
// per incremental checkpoint (the mean over the rounds; sync and async
// summed over the two subtasks).
type largeResult struct {
	keys                    int
	stateBytes              int64 // files of the last checkpoint
	fill, full              time.Duration
	sync, async             time.Duration
	uploaded, changed       int64
	maxUploaded             int64 // the most one checkpoint uploaded
	lastSync                time.Duration
	lastUploaded            int64
	restoreLocal, cp        time.Duration
	restoreObj, rawGet      time.Duration
	objUpload               time.Duration // the last checkpoint's files into the object store
	rescale                 time.Duration
	rescaleRestore          time.Duration // of it, restoring the old subtasks' files
	rescaleImport           time.Duration // of it, ImportStore
	restoreRSS, rescaleRSS  int64         // peak RSS during them
	pebbleOps               float64
	storedBytes, importRows int64
}

func (r largeResult) report(b *testing.B) {
	b.ReportMetric(float64(r.stateBytes)/1e6, "state-MB")
	b.ReportMetric(r.sync.Seconds()*1e3, "sync-ms")
	b.ReportMetric(r.async.Seconds()*1e3, "async-ms")
	b.ReportMetric(float64(r.uploaded)/1e6, "uploaded-MB")
	b.ReportMetric(float64(r.changed)/1e6, "changed-MB")
	b.ReportMetric(float64(r.maxUploaded)/1e6, "max-uploaded-MB")
	b.ReportMetric(r.lastSync.Seconds()*1e3, "final-sync-ms")
	b.ReportMetric(float64(r.lastUploaded)/1e6, "final-uploaded-MB")
	b.ReportMetric(r.restoreLocal.Seconds(), "restore-local-s")
	b.ReportMetric(r.cp.Seconds(), "cp-s")
	b.ReportMetric(r.restoreObj.Seconds(), "restore-obj-s")
	b.ReportMetric(r.rawGet.Seconds(), "raw-get-s")
	b.ReportMetric(r.rescale.Seconds(), "rescale-2to4-s")
	b.ReportMetric(float64(r.restoreRSS)/(1<<20), "restore-peak-rss-MiB")
	b.ReportMetric(float64(r.rescaleRSS)/(1<<20), "rescale-peak-rss-MiB")
	b.ReportMetric(r.pebbleOps, "pebble-get+set/s")
	b.Logf("%d keys, %.0f MB in files: fill %.1fs, full checkpoint %.1fs, object-store upload %.1fs; per interval sync %v async %v, uploaded %.1f MB for %.1f MB changed; rescale: restores %.2fs, imports %.2fs",
		r.keys, float64(r.stateBytes)/1e6, r.fill.Seconds(), r.full.Seconds(), r.objUpload.Seconds(), r.sync, r.async, float64(r.uploaded)/1e6, float64(r.changed)/1e6,
		r.rescaleRestore.Seconds(), r.rescaleImport.Seconds())
}

// largeValue is the size of the benchmark's values.
const largeValue = 100

// largeSubtask is one old subtask: its store and key-group range.
type largeSubtask struct {
	store  *state.Store
	v      *state.VertexState
	h      int32
	groups abi.KeyGroupRange
	dir    string
}

func largeStateRun(b *testing.B, js jetstream.JetStream, mb, rounds, change int) largeResult {
	const p, maxPar = 2, abi.DefaultMaxParallelism
	root := b.TempDir()
	r := largeResult{keys: mb * 1_000_000 / largeValue}
	budget := state.NewBudget(state.DefaultMemoryBudget)
	defer budget.Close()
	subs := make([]*largeSubtask, p)
	for i := range subs {
		g := abi.RangeForSubtask(i, p, maxPar)
		dir := filepath.Join(root, "state", strconv.Itoa(i))
		s, err := state.Open(state.Options{Dir: dir, KeyGroups: g, Budget: budget})
		if err != nil {
			b.Fatal(err)
		}
		v := s.Vertex("count", true)
		h, err := v.RegisterState("n", abi.StateValue)
		if err != nil {
			b.Fatal(err)
		}
		subs[i] = &largeSubtask{store: s, v: v, h: h, groups: g, dir: dir}
		defer s.Discard()
	}
	rng := rand.New(rand.NewPCG(uint64(mb), 36))
	val := make([]byte, largeValue)
	var key []byte
	var entryKey []byte
	put := func(k int) int64 {
		key = strconv.AppendInt(append(key[:0], 'k'), int64(k), 10)
		for j := 0; j < len(val); j += 8 {
			x := rng.Uint64()
			for i := j; i < min(j+8, len(val)); i++ {
				val[i] = byte(x)
				x >>= 8
			}
		}
		kg := abi.KeyGroup(key, maxPar)
		sub := subs[abi.SubtaskForKeyGroup(kg, p, maxPar)]
		if err := sub.v.StatePut(sub.h, key, nil, val); err != nil {
			b.Fatal(err)
		}
		// As a worker does between input messages (worker/task.go).
		if s := sub.store; s.Pending() >= s.CacheEntries() || s.PendingBytes() >= 32<<20 {
			if err := s.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		entryKey = state.AppendEntryKey(entryKey[:0], kg, "count", "n", key, nil)
		return int64(len(entryKey) + len(val))
	}
	start := time.Now()
	for k := range r.keys {
		put(k)
	}
	r.fill = time.Since(start)

	local, err := checkpoint.OpenStorage(filepath.Join(root, "storage"))
	if err != nil {
		b.Fatal(err)
	}
	digests := map[string]string{}
	var digestMu sync.Mutex
	// checkpointAll takes checkpoint id of every subtask into st and
	// returns its metadata, the sync and async phases and the bytes
	// uploaded.
	checkpointAll := func(st *checkpoint.Storage, id int64) (*checkpoint.Metadata, time.Duration, time.Duration, int64) {
		m := &checkpoint.Metadata{JobID: "large", ID: id, Kind: checkpoint.KindCheckpoint, MaxParallelism: maxPar}
		var syncD, asyncD time.Duration
		var uploaded int64
		for i, sub := range subs {
			snap := filepath.Join(root, fmt.Sprintf("snap-%d-%d", id, i))
			t0 := time.Now()
			if err := sub.store.Checkpoint(snap); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			task := checkpoint.TaskID{Chain: 0, Subtask: i}
			files, up := uploadSnapshot(b, st, snap, st.TaskDir(id, task)+"/state", digests, &digestMu)
			asyncD += time.Since(t1)
			syncD += t1.Sub(t0)
			uploaded += up
			if err := os.RemoveAll(snap); err != nil {
				b.Fatal(err)
			}
			m.Tasks = append(m.Tasks, checkpoint.SubtaskState{Task: task, KeyGroups: sub.groups, State: files})
		}
		return m, syncD, asyncD, uploaded
	}
	start = time.Now()
	m, _, _, _ := checkpointAll(local, 1)
	r.full = time.Since(start)
	for round := range rounds {
		for range change {
			r.changed += put(rng.IntN(r.keys))
		}
		var syncD, asyncD time.Duration
		var up int64
		m, syncD, asyncD, up = checkpointAll(local, int64(2+round))
		r.sync += syncD
		r.async += asyncD
		r.uploaded += up
		r.maxUploaded = max(r.maxUploaded, up)
		// The last interval's checkpoint is the final one of a job whose
		// input ended then.
		r.lastSync, r.lastUploaded = syncD, up
	}
	r.sync /= time.Duration(rounds)
	r.async /= time.Duration(rounds)
	r.uploaded /= int64(rounds)
	r.changed /= int64(rounds)
	var paths []string
	for _, t := range m.Tasks {
		for _, h := range t.State {
			r.stateBytes += h.Size
			paths = append(paths, filepath.Join(local.Root(), filepath.FromSlash(h.Path)))
		}
	}

	// Restores from the filesystem, and cp of the same files.
	restoreAll := func(st *checkpoint.Storage, m *checkpoint.Metadata, into string) time.Duration {
		t0 := time.Now()
		for _, t := range m.Tasks {
			dst := filepath.Join(into, t.Task.String())
			if err := st.Restore(m, t.Task, dst); err != nil {
				b.Fatal(err)
			}
			s, err := state.Open(state.Options{Dir: dst, KeyGroups: t.KeyGroups, Budget: budget})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Discard(); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0)
	}
	resetPeakRSS()
	r.restoreLocal = restoreAll(local, m, filepath.Join(root, "restore-local"))
	r.restoreRSS = peakRSS()
	cpDir := filepath.Join(root, "cp")
	if err := os.MkdirAll(cpDir, 0o755); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if out, err := exec.Command("cp", append([]string{"-t", cpDir}, paths...)...).CombinedOutput(); err != nil {
		b.Fatalf("cp: %v: %s", err, out)
	}
	r.cp = time.Since(t0)
	os.RemoveAll(cpDir)
	os.RemoveAll(filepath.Join(root, "restore-local"))

	// The same checkpoint in the object store: restores, and raw gets.
	bucket := fmt.Sprintf("large-%d", mb)
	obj, err := checkpoint.OpenObjectStorage(js, bucket, "ck", 1)
	if err != nil {
		b.Fatal(err)
	}
	t0 = time.Now()
	mo, _, _, _ := checkpointAll(obj, int64(2+rounds))
	r.objUpload = time.Since(t0)
	resetPeakRSS()
	r.restoreObj = restoreAll(obj, mo, filepath.Join(root, "restore-obj"))
	r.restoreRSS = max(r.restoreRSS, peakRSS())
	os.RemoveAll(filepath.Join(root, "restore-obj"))
	r.rawGet = rawGets(b, js, bucket, "ck/", mo)

	// Rescale 2→4 from the filesystem.
	resetPeakRSS()
	t0 = time.Now()
	for n := range 2 * p {
		g := abi.RangeForSubtask(n, 2*p, maxPar)
		s, err := state.Open(state.Options{Dir: filepath.Join(root, "rescaled", strconv.Itoa(n)), KeyGroups: g, Budget: budget})
		if err != nil {
			b.Fatal(err)
		}
		for _, t := range m.Tasks {
			if t.KeyGroups.End < g.Start || t.KeyGroups.Start > g.End {
				continue
			}
			tmp := filepath.Join(root, fmt.Sprintf("rescale-%d-%d", t.Task.Subtask, n))
			t1 := time.Now()
			if err := local.Restore(m, t.Task, tmp); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			st, err := s.ImportStore(tmp, t.KeyGroups)
			if err != nil {
				b.Fatal(err)
			}
			r.rescaleRestore += t2.Sub(t1)
			r.rescaleImport += time.Since(t2)
			r.importRows += st.Entries
			os.RemoveAll(tmp)
		}
		if err := s.Discard(); err != nil {
			b.Fatal(err)
		}
	}
	r.rescale = time.Since(t0)
	r.rescaleRSS = peakRSS()
	// Every key was put once by the fill, and only overwritten since.
	if r.importRows != int64(r.keys) {
		b.Fatalf("rescale imported %d entries, the state holds %d keys", r.importRows, r.keys)
	}

	// Pebble's own point reads and writes of the same keys, in a restored
	// copy of subtask 0's state.
	dst := filepath.Join(root, "pebble")
	if err := local.Restore(m, m.Tasks[0].Task, dst); err != nil {
		b.Fatal(err)
	}
	r.pebbleOps = pebblePointOps(b, dst, r.keys, subs[0].groups, maxPar)
	for _, sub := range subs {
		sub.store.Discard()
	}
	return r
}

// uploadSnapshot puts every file of the snapshot directory snap into st as
// shared files, four at a time, as worker.uploadIncremental does, SSTs
// hashed once (digests). It returns the handles, named as rel/<file>, and
// the bytes written now.
func uploadSnapshot(b *testing.B, st *checkpoint.Storage, snap, rel string, digests map[string]string, mu *sync.Mutex) ([]checkpoint.FileHandle, int64) {
	entries, err := os.ReadDir(snap)
	if err != nil {
		b.Fatal(err)
	}
	files := make([]checkpoint.FileHandle, len(entries))
	uploaded := make([]int64, len(entries))
	errs := make([]error, len(entries))
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, e := range entries {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			p := filepath.Join(snap, e.Name())
			var sum string
			fi, err := os.Stat(p)
			key := ""
			if err == nil && filepath.Ext(p) == ".sst" {
				key = fmt.Sprintf("%s/%d", e.Name(), fi.Size())
				mu.Lock()
				sum = digests[key]
				mu.Unlock()
			}
			if err == nil && sum == "" {
				sum, err = checkpoint.FileSHA256(p)
				if key != "" {
					mu.Lock()
					digests[key] = sum
					mu.Unlock()
				}
			}
			if err != nil {
				errs[i] = err
				return
			}
			h, up, err := st.PutShared(p, sum)
			h.Name = rel + "/" + e.Name()
			files[i], errs[i] = h, err
			if up {
				uploaded[i] = h.Size
			}
		})
	}
	wg.Wait()
	var n int64
	for i, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
		n += uploaded[i]
	}
	return files, n
}

// rawGets reads every object of the checkpoint m from the bucket into
// io.Discard, four at a time as Storage.Restore reads them, and returns
// the time it took.
func rawGets(b *testing.B, js jetstream.JetStream, bucket, prefix string, m *checkpoint.Metadata) time.Duration {
	obs, err := js.ObjectStore(context.Background(), bucket)
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	for _, t := range m.Tasks {
		for _, h := range t.State {
			names = append(names, prefix+h.Path)
		}
	}
	t0 := time.Now()
	errs := make([]error, len(names))
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			res, err := obs.Get(context.Background(), name)
			if err == nil {
				_, err = io.Copy(io.Discard, res)
				res.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(t0)
}

// pebblePointOps opens dir with Pebble alone (the store's key layout, the
// budget's block cache) and returns random point reads and writes of the
// benchmark's keys per second: a Get and a Set per key, a batch committed
// per 512, no WAL.
func pebblePointOps(b *testing.B, dir string, keys int, groups abi.KeyGroupRange, maxPar int) float64 {
	cache := pebble.NewCache(state.DefaultMemoryBudget / 4)
	defer cache.Unref()
	db, err := pebble.Open(dir, &pebble.Options{Cache: cache, DisableWAL: true, FormatMajorVersion: pebble.FormatNewest, Logger: quietPebble{}})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	wb := db.NewBatch()
	val := make([]byte, largeValue)
	var key, pk []byte
	const ops = 300_000
	t0 := time.Now()
	done := 0
	for done < ops {
		key = strconv.AppendInt(append(key[:0], 'k'), int64(rng.IntN(keys)), 10)
		kg := abi.KeyGroup(key, maxPar)
		if !groups.Contains(kg) {
			continue
		}
		pk = state.AppendEntryKey(pk[:0], kg, "count", "n", key, nil)
		v, closer, err := db.Get(pk)
		if err == nil {
			copy(val, v)
			closer.Close()
		}
		val[0]++
		if err := wb.Set(pk, val, nil); err != nil {
			b.Fatal(err)
		}
		done++
		if done%512 == 0 {
			if err := wb.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			wb.Reset()
		}
	}
	return float64(ops) / time.Since(t0).Seconds()
}

// resetPeakRSS resets the process's VmHWM (Linux: clear_refs 5), so that
// peakRSS reports the peak from now on.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSS returns VmHWM of /proc/self/status, bytes.
func peakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}

// quietPebble is a Pebble logger that keeps Pebble's notes out of the
// benchmark's output.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
