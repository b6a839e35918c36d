package checkpoint

import (
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// encoderWindow is the window of the encoders encodeInto uses. zstd's
// default of 8 MiB makes each encoder hold about 9 MiB; with 1 MiB it is
// under 3 MiB, and Pebble's tables, already block-compressed, lose next to
// nothing by it (a 1.6 MiB table of small values came out 0.35% larger,
// tables under 1 MiB the same). Readers accept windows up to
// maxZstdWindow.
const encoderWindow = 1 << 20

// maxIdleEncoders bounds the encoders of one level kept for reuse, and so
// the memory they hold between checkpoints (under 3 MiB each): twice the
// files one subtask uploads at once (uploadConcurrency in package worker).
// Beyond that, uploads side by side make encoders that are then dropped.
const maxIdleEncoders = 8

// encoders keeps idle zstd encoders by level. A new encoder allocates its
// tables and window before it compresses a byte: about 7 ms of CPU for a
// 100 KiB file on a virtual machine, where the first touch of each page is
// a costly fault, against 20–30 µs for a reused one, and a checkpoint
// writes half a dozen files per subtask every interval. Encoders are kept,
// not left to a sync.Pool, because with checkpoints every second garbage
// collections come more often than checkpoints and would empty the pool
// between them.
var encoders struct {
	mu   sync.Mutex
	idle [zstd.SpeedBestCompression + 1][]*zstd.Encoder
}

// getEncoder returns an encoder at level that writes to w.
func getEncoder(level int, w io.Writer) (*zstd.Encoder, error) {
	encoders.mu.Lock()
	idle := encoders.idle[level]
	if n := len(idle); n > 0 {
		enc := idle[n-1]
		encoders.idle[level] = idle[:n-1]
		encoders.mu.Unlock()
		enc.Reset(w)
		return enc, nil
	}
	encoders.mu.Unlock()
	return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.EncoderLevel(level)), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(encoderWindow))
}

// putEncoder keeps enc, closed after a stream that ended without an
// error, for a later getEncoder at level.
func putEncoder(level int, enc *zstd.Encoder) {
	// It must not keep the last stream's writer alive.
	enc.Reset(nil)
	encoders.mu.Lock()
	defer encoders.mu.Unlock()
	if len(encoders.idle[level]) < maxIdleEncoders {
		encoders.idle[level] = append(encoders.idle[level], enc)
	}
}

// decoders holds zstd decoders between reads. A new decoder allocates its
// window when it meets a frame, about 2 ms for a 1 MiB window and 8 ms for
// 8 MiB, and a restore reads every file of a subtask's state, one after
// the other. Restores come in bursts, so a sync.Pool, which lets the
// decoders go when the burst is over, fits.
var decoders = sync.Pool{New: func() any { return nil }}

// getDecoder returns a decoder reading r.
func getDecoder(r io.Reader) (*zstd.Decoder, error) {
	if dec, ok := decoders.Get().(*zstd.Decoder); ok {
		if err := dec.Reset(r); err == nil {
			return dec, nil
		}
		dec.Close()
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
	if err != nil {
		return nil, err
	}
	if err := dec.Reset(r); err != nil {
		dec.Close()
		return nil, err
	}
	return dec, nil
}

// putDecoder keeps dec for a later getDecoder, without its reader.
func putDecoder(dec *zstd.Decoder) {
	_ = dec.Reset(nil)
	decoders.Put(dec)
}
