package instrument

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/wstream/wstream/internal/testkit/testmod"
)

// dataImage applies the active data segments of wasm, in order, to a zero
// memory, and returns it with the passive segments and the number of
// segments. It reads the data section on its own, independently of the
// rewrite.
func dataImage(t testing.TB, wasm []byte) (image []byte, passive [][]byte, n int) {
	t.Helper()
	uleb := func(b []byte, i *int) uint64 {
		v, k := binary.Uvarint(b[*i:])
		if k <= 0 {
			t.Fatalf("bad LEB128 at %d", *i)
		}
		*i += k
		return v
	}
	for i := 8; i < len(wasm); {
		id := wasm[i]
		i++
		size := int(uleb(wasm, &i))
		end := i + size
		if id != secData {
			i = end
			continue
		}
		n = int(uleb(wasm, &i))
		for range n {
			flag := uleb(wasm, &i)
			if flag == 1 {
				l := int(uleb(wasm, &i))
				passive = append(passive, wasm[i:i+l])
				i += l
				continue
			}
			if flag == 2 && uleb(wasm, &i) != 0 {
				t.Fatal("a segment of another memory")
			}
			if wasm[i] != 0x41 {
				t.Fatalf("offset expression %#x, want i32.const", wasm[i])
			}
			i++
			var off int64
			for shift := 0; ; shift += 7 {
				c := wasm[i]
				i++
				off |= int64(c&0x7f) << shift
				if c&0x80 == 0 {
					if c&0x40 != 0 {
						off |= -1 << (shift + 7)
					}
					break
				}
			}
			if wasm[i] != 0x0b {
				t.Fatal("offset expression longer than i32.const")
			}
			i++
			l := int(uleb(wasm, &i))
			at := int(uint32(off))
			if at+l > len(image) {
				image = append(image, make([]byte, at+l-len(image))...)
			}
			copy(image[at:], wasm[i:i+l])
			i += l
		}
		if i != end {
			t.Fatalf("data section ends at %d, want %d", i, end)
		}
	}
	return image, passive, n
}

// withoutData returns wasm without its data section.
func withoutData(t testing.TB, wasm []byte) []byte {
	t.Helper()
	out := slices.Clone(wasm[:8])
	for i := 8; i < len(wasm); {
		size, k := binary.Uvarint(wasm[i+1:])
		if k <= 0 {
			t.Fatalf("bad section size at %d", i+1)
		}
		end := i + 1 + k + int(size)
		if wasm[i] != secData {
			out = append(out, wasm[i:end]...)
		}
		i = end
	}
	return out
}

// checkData checks that the instrumented module's data segments write what
// the original's do, and that DataJoined counts the segments joined.
func checkData(t testing.TB, orig []byte, res *Result) {
	t.Helper()
	oi, op, on := dataImage(t, orig)
	ii, ip, in := dataImage(t, res.Wasm)
	// Joining never writes past the last byte of a segment.
	if !bytes.Equal(oi, ii) {
		t.Errorf("the data segments write another memory image (%d bytes, was %d)", len(ii), len(oi))
	}
	if !slices.EqualFunc(op, ip, bytes.Equal) {
		t.Error("the passive data segments changed")
	}
	if on-in != res.DataJoined {
		t.Errorf("%d data segments, %d before; Result.DataJoined = %d", in, on, res.DataJoined)
	}
}

// TestJoinData: runs of segments with short gaps of zeros are joined,
// unless a segment writes into a gap, they overlap, or the memory or the
// segments cannot be assumed zero or unnamed; instantiated, the module's
// memory is the same either way.
func TestJoinData(t *testing.T) {
	long := fmt.Sprintf("%0*d", maxDataGap, 0)
	for _, c := range []struct {
		name, decls string
		joined      int
	}{
		{"short gaps", `(data (i32.const 0) "ab") (data (i32.const 10) "cd") (data (i32.const 12) "ef") (data (i32.const 100) "gh")`, 2},
		{"the longest gap", fmt.Sprintf(`(data (i32.const 0) "a") (data (i32.const %d) "b")`, 1+maxDataGap), 1},
		{"a longer gap", fmt.Sprintf(`(data (i32.const 0) "a") (data (i32.const %d) "b")`, 2+maxDataGap), 0},
		{"not in order", `(data (i32.const 10) "cd") (data (i32.const 0) "ab") (data (i32.const 2) "ef")`, 1},
		{"overlapping", `(data (i32.const 0) "abcd") (data (i32.const 2) "XY")`, 0},
		{"an earlier segment in the gap", `(data (i32.const 5) "X") (data (i32.const 0) "ab") (data (i32.const 10) "cd")`, 0},
		{"a later segment in the gap", `(data (i32.const 0) "ab") (data (i32.const 10) "cd") (data (i32.const 5) "X")`, 0},
		{"a long segment", `(data (i32.const 0) "` + long + `") (data (i32.const 70) "z")`, 1},
		{"at the end of memory", `(data (i32.const 65530) "ab") (data (i32.const 65534) "cd")`, 1},
		{"a passive segment", `(data (i32.const 0) "ab") (data (i32.const 10) "cd") (data "p")`, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			orig := testmod.WAT(t, `(module (memory (export "memory") 1) `+c.decls+`
  (func (export "f") (loop (br_if 0 (i32.const 0)))))`)
			res := instrument(t, orig)
			if res.DataJoined != c.joined {
				t.Errorf("%d segments joined, want %d", res.DataJoined, c.joined)
			}
			checkData(t, orig, res)
			if got, want := memoryAfter(t, res.Wasm), memoryAfter(t, orig); !bytes.Equal(got, want) {
				t.Error("the instrumented module's memory differs after instantiation")
			}
		})
	}
	t.Run("named segments", func(t *testing.T) {
		orig := testmod.WAT(t, `(module (memory 1) (data (i32.const 0) "ab") (data (i32.const 10) "cd"))`)
		// A name section naming segment 1 "d": joining would leave the
		// name without its segment.
		sub := []byte{9, 4, 1, 1, 1, 'd'}
		sec := append([]byte{4, 'n', 'a', 'm', 'e'}, sub...)
		orig = append(append(orig, 0, byte(len(sec))), sec...)
		if res := instrument(t, orig); res.DataJoined != 0 {
			t.Errorf("%d segments joined that the name section names", res.DataJoined)
		}
	})
	t.Run("imported memory", func(t *testing.T) {
		res := instrument(t, testmod.WAT(t, `(module (import "env" "memory" (memory 1))
  (data (i32.const 0) "ab") (data (i32.const 10) "cd"))`))
		if res.DataJoined != 0 {
			t.Errorf("%d segments joined in a memory that need not be zero", res.DataJoined)
		}
	})
}

// memoryAfter instantiates wasm and returns its memory.
func memoryAfter(t *testing.T, wasm []byte) []byte {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	mod, err := rt.Instantiate(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	mem := mod.ExportedMemory("memory")
	b, ok := mem.Read(0, mem.Size())
	if !ok {
		t.Fatal("reading memory")
	}
	return slices.Clone(b)
}
