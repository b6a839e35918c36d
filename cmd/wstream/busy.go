package main

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// busyDelay is how long an operation runs before it is shown: a quick one
// shows nothing.
const busyDelay = 400 * time.Millisecond

// busy shows that an operation that can take seconds (compiling a module,
// a savepoint, a stop, an upgrade) is under way. On a terminal it is a
// spinner and the time so far, on one line rewritten in place and cleared
// at the end; off one, log (when not nil) gets a line at info level every
// tick (a log that says the client is waiting, not hung). stop ends it.
func busy(w io.Writer, log *slog.Logger, what string) (stop func()) {
	return busyEvery(w, isTerminal(w), log, what, 100*time.Millisecond, 10*time.Second)
}

var spinnerFrames = []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")

func busyEvery(w io.Writer, terminal bool, log *slog.Logger, what string, frame, tick time.Duration) (stop func()) {
	if !terminal && log == nil {
		return func() {}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		every := tick
		if terminal {
			every = frame
		}
		delay := time.NewTimer(busyDelay)
		select {
		case <-done:
			delay.Stop()
			return
		case <-delay.C:
		}
		t := time.NewTicker(every)
		defer t.Stop()
		shown := false
		for i := 0; ; i++ {
			if terminal {
				fmt.Fprintf(w, "\r\033[K%c %s %s", spinnerFrames[i%len(spinnerFrames)], what, time.Since(start).Round(100*time.Millisecond))
				shown = true
			} else if i > 0 {
				log.Info(what, "elapsed", time.Since(start).Round(time.Second).String())
			}
			select {
			case <-done:
				if shown {
					fmt.Fprint(w, "\r\033[K")
				}
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-finished
		})
	}
}
