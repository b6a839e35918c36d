package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// listenMetrics opens the listener of --http ADDR (host:port; port 0 picks
// one) before anything starts, so that an address in use fails the command
// at once.
func listenMetrics(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w", addr, err)
	}
	return l, nil
}

// serveMetrics serves h at /metrics on l until stop is called, and returns
// the URL it serves. A worker process has no REST API or UI: its listener
// serves only the metrics.
func serveMetrics(l net.Listener, h http.Handler, log *slog.Logger) (url string, stop func()) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serving metrics", "addr", l.Addr().String(), "err", err)
		}
	}()
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
	return "http://" + l.Addr().String() + "/metrics", stop
}
