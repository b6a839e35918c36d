package bench

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wstream/wstream/abi"
	"github.com/wstream/wstream/checkpoint"
	"github.com/wstream/wstream/state"
)

// BenchmarkRestore restores the same keyed state (about 200 MB of values)
// from a native snapshot (the Pebble files, as checkpoints store them) and
// from a canonical one (as savepoints store it), side by side.
func BenchmarkRestore(b *testing.B) {
	const keys, valueSize = 200_000, 1000
	dir := b.TempDir()
	all := abi.KeyGroupRange{Start: 0, End: abi.DefaultMaxParallelism - 1}
	src, err := state.Open(state.Options{Dir: filepath.Join(dir, "src"), KeyGroups: all})
	if err != nil {
		b.Fatal(err)
	}
	v := src.Vertex("v", true)
	h, err := v.RegisterState("s", abi.StateValue)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	val := make([]byte, valueSize)
	key := make([]byte, 8)
	for i := 0; i < keys; i++ {
		rng.Read(val)
		binary.BigEndian.PutUint64(key, uint64(i))
		if err := v.StatePut(h, key, nil, val); err != nil {
			b.Fatal(err)
		}
		if i%10000 == 0 {
			if err := src.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	st, err := checkpoint.OpenStorage(filepath.Join(dir, "storage"))
	if err != nil {
		b.Fatal(err)
	}
	task := checkpoint.TaskID{}
	snap := filepath.Join(dir, "snap")
	if err := src.Checkpoint(snap); err != nil {
		b.Fatal(err)
	}
	native, err := st.CopyDir(1, st.TaskDir(1, task)+"/state", snap)
	if err != nil {
		b.Fatal(err)
	}
	canon := filepath.Join(dir, "canonical.zst")
	f, err := os.Create(canon)
	if err != nil {
		b.Fatal(err)
	}
	stats, err := src.ExportCanonical(f, 0)
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	if err := src.Close(); err != nil {
		b.Fatal(err)
	}
	meta := &checkpoint.Metadata{JobID: "bench", ID: 1, Kind: checkpoint.KindCheckpoint, MaxParallelism: abi.DefaultMaxParallelism,
		Tasks: []checkpoint.SubtaskState{{Task: task, KeyGroups: all, State: native}}}
	if err := st.WriteMetadata(meta); err != nil {
		b.Fatal(err)
	}
	var nativeBytes int64
	for _, h := range native {
		nativeBytes += h.Size
	}
	b.Logf("state: %d entries, %d MB raw; native %d MB, canonical %d MB", stats.Entries, stats.RawBytes>>20, nativeBytes>>20, stats.CompressedBytes>>20)

	check := func(s *state.Store) {
		v := s.Vertex("v", true)
		h, _ := v.RegisterState("s", abi.StateValue)
		binary.BigEndian.PutUint64(key, keys-1)
		if got, err := v.StateGet(h, key, nil, nil); err != nil || len(got) != valueSize {
			b.Fatalf("restored state misses the last key: %v", err)
		}
	}
	b.Run("native", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			dst := filepath.Join(b.TempDir(), fmt.Sprint(i))
			start := time.Now()
			if err := st.Restore(meta, task, dst); err != nil {
				b.Fatal(err)
			}
			s, err := state.Open(state.Options{Dir: dst, KeyGroups: all})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms/restore")
			check(s)
			s.Close()
		}
	})
	b.Run("canonical", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			dst := filepath.Join(b.TempDir(), fmt.Sprint(i))
			start := time.Now()
			s, err := state.Open(state.Options{Dir: dst, KeyGroups: all})
			if err != nil {
				b.Fatal(err)
			}
			r, err := os.Open(canon)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.ImportCanonical(r); err != nil {
				b.Fatal(err)
			}
			r.Close()
			b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms/restore")
			check(s)
			s.Close()
		}
	})
}
