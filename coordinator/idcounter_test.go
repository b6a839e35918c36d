package coordinator

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/internal/natstest"
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
		if err := ids.reserve(ctx, "job-a", id); err != nil {
			t.Fatalf("reserve %d: %v", id, err)
		}
	}
	// Ids never go back, nor repeat.
	for _, id := range []int64{5, 3} {
		if err := ids.reserve(ctx, "job-a", id); !errors.Is(err, errIDUsed) {
			t.Fatalf("reserve %d after 5 = %v, want errIDUsed", id, err)
		}
	}
	if n, _, err := ids.current(ctx, "job-a"); err != nil || n != 5 {
		t.Fatalf("counter = %d, %v; want 5", n, err)
	}
	// Jobs count apart.
	if err := ids.reserve(ctx, "job-b", 1); err != nil {
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
				err := c.reserve(ctx, "job-c", id)
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
