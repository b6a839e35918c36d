package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/transport"
)

// exitSignal is the status of a command a signal ended, as shells report
// it: 128 + the signal's number.
func exitSignal(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

// interrupts handles Ctrl-C and SIGTERM during a deploy as a service
// manager expects. The first suspends a job that checkpoints: it stops with
// a savepoint, its sinks commit up to it, and deploy --resume continues it
// from there. A job that does not checkpoint is canceled, as is a job whose
// savepoint fails, and any job at the second signal; a canceled job keeps
// nothing it had not committed (its sinks abort).
type interrupts struct {
	errw    io.Writer
	cancel  context.CancelFunc
	started chan string // the job's id, once submitted
	// detach: the job runs in a cluster and is not this client's (deploy
	// --nats without --attached): a signal ends the client only.
	detach bool

	pending sync.WaitGroup // a suspend in flight

	mu          sync.Mutex
	conn        *nats.Conn // set by ready, once the engine runs
	checkpoints bool       // the job checkpoints (ready)
	sig         os.Signal
	sp          string // the savepoint a suspended job stopped at
}

// ready says how to reach the job's coordinator and whether the job
// checkpoints; until then, and until the job has an id, a signal cancels
// (validation, compilation, start-up).
func (ir *interrupts) ready(conn *nats.Conn, checkpoints bool) {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	ir.conn, ir.checkpoints = conn, checkpoints
}

func (ir *interrupts) watch(ctx context.Context, sigs <-chan os.Signal) {
	id, signals := "", 0
	for {
		var sig os.Signal
		select {
		case <-ctx.Done():
			return
		case id = <-ir.started:
			continue
		case sig = <-sigs:
		}
		signals++
		ir.mu.Lock()
		ir.sig = sig
		if ir.detach {
			// deploy says, once, that the job goes on and how to follow it.
			ir.mu.Unlock()
			ir.cancel()
			continue
		}
		suspend := signals == 1 && id != "" && ir.checkpoints
		ir.mu.Unlock()
		if !suspend {
			if signals == 1 && id != "" {
				fmt.Fprintf(ir.errw, "wstream: %s: canceling job %s, which does not checkpoint\n", sig, id)
			}
			ir.cancel()
			continue
		}
		fmt.Fprintf(ir.errw, "wstream: %s: suspending job %s with a savepoint (again to cancel it)\n", sig, id)
		ir.pending.Add(1)
		go func() {
			defer ir.pending.Done()
			ir.suspend(ctx, id)
		}()
	}
}

// suspend stops job id with a savepoint, and cancels it when that fails.
func (ir *interrupts) suspend(ctx context.Context, id string) {
	b, _ := json.Marshal(transport.SavepointRequest{JobID: id, Stop: true})
	ir.mu.Lock()
	conn := ir.conn
	ir.mu.Unlock()
	msg, err := conn.RequestWithContext(ctx, transport.SubjectSavepoint, b)
	if ctx.Err() != nil {
		return
	}
	var r transport.SavepointReply
	if err == nil {
		err = json.Unmarshal(msg.Data, &r)
	}
	if err == nil && r.Error != "" {
		err = fmt.Errorf("%s", r.Error)
	}
	if err != nil {
		fmt.Fprintf(ir.errw, "wstream: the savepoint of job %s failed (%v): canceling it\n", id, err)
		ir.cancel()
		return
	}
	ir.mu.Lock()
	ir.sp = r.Dir
	ir.mu.Unlock()
}

// signal is the last signal received, or nil.
func (ir *interrupts) signal() os.Signal {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	return ir.sig
}

// suspendedAt is the savepoint the job was suspended with, or "": it waits
// for the answer to a suspension in flight (the job may end before it
// arrives).
func (ir *interrupts) suspendedAt() string {
	answered := make(chan struct{})
	go func() {
		ir.pending.Wait()
		close(answered)
	}()
	select {
	case <-answered:
	case <-time.After(time.Minute):
	}
	ir.mu.Lock()
	defer ir.mu.Unlock()
	return ir.sp
}
