package checkpoint

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestReusedEncoders writes many files at every level, side by side, so
// that encoders are reused across streams and goroutines, and reads each
// back, side by side too, after a damaged one: an encoder or decoder that
// kept a previous stream's history or reader, or one shared by two streams
// at once, shows as a wrong file (or, with -race, as a race).
func TestReusedEncoders(t *testing.T) {
	s := testStorage(t)
	src := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	const files = 48
	contents := make([][]byte, files)
	for i := range contents {
		// Sizes from empty to past the encoders' window, compressible and not.
		n := []int{0, 1, 13, 900, 70_000, encoderWindow + 5000}[i%6]
		b := make([]byte, n)
		for j := range b {
			if i%2 == 0 {
				b[j] = byte(rng.IntN(256))
			} else {
				b[j] = "abcdefgh"[(j/7+i)%8]
			}
		}
		contents[i] = b
		if err := os.WriteFile(filepath.Join(src, fmt.Sprint(i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for level := 1; level <= 4; level++ {
		if err := s.SetCompression(level); err != nil {
			t.Fatal(err)
		}
		id := int64(level)
		handles := make([]FileHandle, files)
		errs := make([]error, files)
		var wg sync.WaitGroup
		for i := range files {
			wg.Add(1)
			go func() {
				defer wg.Done()
				handles[i], errs[i] = s.CopyFile(id, fmt.Sprintf("f/%d", i), filepath.Join(src, fmt.Sprint(i)))
			}()
		}
		wg.Wait()
		for i, h := range handles {
			if errs[i] != nil {
				t.Fatalf("level %d, file %d: %v", level, i, errs[i])
			}
			if !h.Compressed || h.RawSize != int64(len(contents[i])) {
				t.Fatalf("level %d, file %d: handle %+v, want compressed from %d bytes", level, i, h, len(contents[i]))
			}
		}
		// A damaged file first, so that its decoder, put back after an
		// error, is among those the reads below reuse.
		damaged := handles[4]
		p := filepath.Join(s.Dir(id), filepath.FromSlash(damaged.Path))
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0xff
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := readHandle(s, id, damaged); err == nil {
			t.Fatalf("level %d: the damaged file read back %d bytes without an error", level, len(got))
		}
		for i, h := range handles {
			if i == 4 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := readHandle(s, id, h)
				if err != nil || !bytes.Equal(got, contents[i]) {
					t.Errorf("level %d, file %d: read back %d bytes (%v), want its %d bytes", level, i, len(got), err, len(contents[i]))
				}
			}()
		}
		wg.Wait()
	}
	encoders.mu.Lock()
	defer encoders.mu.Unlock()
	for level, idle := range encoders.idle {
		if len(idle) > maxIdleEncoders {
			t.Fatalf("%d idle encoders of level %d, more than %d", len(idle), level, maxIdleEncoders)
		}
	}
}

func readHandle(s *Storage, id int64, h FileHandle) ([]byte, error) {
	r, err := s.Open(id, h)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}
