package coordinator

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/internal/testkit/natstest"
)

func TestIDCounter(t *testing.T) {
	url, _ := natstest.Start(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids, err := openIDCounter(ctx, nc, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n, _, err := ids.current(ctx, "job-a"); err != nil || n != 0 {
		t.Fatalf("a new job's counter = %d, %v; want 0", n, err)
	}
	for _, id := range []int64{1, 2, 5} {
		if err := ids.reserve(ctx, "job-a", id, 0); err != nil {
			t.Fatalf("reserve %d: %v", id, err)
		}
	}
	// Ids never go back, nor repeat.
	for _, id := range []int64{5, 3} {
		if err := ids.reserve(ctx, "job-a", id, 0); !errors.Is(err, errIDUsed) {
			t.Fatalf("reserve %d after 5 = %v, want errIDUsed", id, err)
		}
	}
	if n, _, err := ids.current(ctx, "job-a"); err != nil || n != 5 {
		t.Fatalf("counter = %d, %v; want 5", n, err)
	}
	// Jobs count apart.
	if err := ids.reserve(ctx, "job-b", 1, 0); err != nil {
		t.Fatal(err)
	}
	// A counter survives the connection: a new coordinator reads it back.
	nc2, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	ids2, err := openIDCounter(ctx, nc2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n, _, err := ids2.current(ctx, "job-a"); err != nil || n != 5 {
		t.Fatalf("counter read by a second coordinator = %d, %v; want 5", n, err)
	}

	// Compare-and-set: of coordinators racing for the same ids, exactly one
	// gets each.
	const racers, each = 4, 25
	var mu sync.Mutex
	won := map[int64]int{}
	var wg sync.WaitGroup
	for r := range racers {
		c := ids
		if r%2 == 1 {
			c = ids2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := int64(100); id < 100+each; id++ {
				err := c.reserve(ctx, "job-c", id, 0)
				switch {
				case err == nil:
					mu.Lock()
					won[id]++
					mu.Unlock()
				case !errors.Is(err, errIDUsed):
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for id, n := range won {
		if n != 1 {
			t.Fatalf("id %d reserved %d times", id, n)
		}
	}
	if n, _, _ := ids.current(ctx, "job-c"); n != 100+each-1 {
		t.Fatalf("counter after the race = %d, want %d", n, 100+each-1)
	}
}

// TestIDCounterFenced: a new leader stamps the counter with its epoch;
// from then on a reservation of an earlier epoch is refused as deposed,
// whether it read the counter before the stamp (its compare-and-set
// fails, it reads again) or after; the new leader's go on.
func TestIDCounterFenced(t *testing.T) {
	url, _ := natstest.Start(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids, err := openIDCounter(ctx, nc, 1)
	if err != nil {
		t.Fatal(err)
	}
	// A value written before leases reads as epoch 0.
	if _, err := ids.kv.Put(ctx, "j", []byte("3")); err != nil {
		t.Fatal(err)
	}
	if err := ids.reserve(ctx, "j", 4, 10); err != nil {
		t.Fatal(err)
	}
	_, _, rev, err := ids.read(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ids.stamp(ctx, "j", 20); err != nil || n != 4 {
		t.Fatalf("stamp at epoch 20 = %d, %v; want 4", n, err)
	}
	if n, epoch, _, err := ids.read(ctx, "j"); err != nil || n != 4 || epoch != 20 {
		t.Fatalf("counter after the stamp = %d at epoch %d, %v; want 4 at 20", n, epoch, err)
	}
	// The deposed leader's write prepared on the revision before the stamp.
	if err := ids.write(ctx, "j", 5, 10, rev); !isWrongSequence(err) {
		t.Fatalf("a write on the revision before the stamp = %v, want a wrong-sequence refusal", err)
	}
	for _, id := range []int64{5, 100} {
		if err := ids.reserve(ctx, "j", id, 10); !errors.Is(err, errDeposed) {
			t.Fatalf("reserve %d at epoch 10 after the stamp at 20 = %v, want errDeposed", id, err)
		}
	}
	if _, err := ids.stamp(ctx, "j", 10); !errors.Is(err, errDeposed) {
		t.Fatalf("stamp at epoch 10 after 20 = %v, want errDeposed", err)
	}
	if err := ids.reserve(ctx, "j", 5, 20); err != nil {
		t.Fatal(err)
	}
	if n, epoch, _, _ := ids.read(ctx, "j"); n != 5 || epoch != 20 {
		t.Fatalf("counter = %d at epoch %d, want 5 at 20", n, epoch)
	}
	// A job that has used no id yet is stamped too.
	if n, err := ids.stamp(ctx, "new", 20); err != nil || n != 0 {
		t.Fatalf("stamp of a new job = %d, %v", n, err)
	}
	if err := ids.reserve(ctx, "new", 1, 10); !errors.Is(err, errDeposed) {
		t.Fatalf("reserve at epoch 10 on a job stamped at 20 = %v, want errDeposed", err)
	}
}
