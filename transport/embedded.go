package transport

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/wstream/wstream/internal/logging"
)

// EmbeddedOptions configure an in-process NATS server with JetStream.
type EmbeddedOptions struct {
	StoreDir string // JetStream storage directory
	// Listen is "host:port" to accept network clients (other workers); empty
	// means in-process connections only.
	Listen string
	// Configure, when set, adjusts the server's options before it starts
	// (the tenant authority makes it trust its operator).
	Configure func(*server.Options) error
	// Log receives the server's warnings and errors once it runs (and its
	// notices at debug level); nil drops them.
	Log *slog.Logger
}

// StartEmbedded starts a NATS server with JetStream inside this process and
// waits until it is ready.
func StartEmbedded(o EmbeddedOptions) (*server.Server, error) {
	opts := &server.Options{
		ServerName: "wstream",
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		NoLog:      true,
		// Records travel in batches of tens of KiB, and modules are chunked by
		// the object store, so the default payload limit is enough.
	}
	if o.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(o.Listen)
		if err != nil {
			return nil, fmt.Errorf("nats listen address %q: %w", o.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("nats listen address %q: bad port", o.Listen)
		}
		if p == 0 {
			p = server.RANDOM_PORT
		}
		opts.Host, opts.Port = host, p
	}
	if o.Configure != nil {
		if err := o.Configure(opts); err != nil {
			return nil, err
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("starting embedded NATS server: %w", err)
	}
	// The server reports why it cannot start (a busy port, a store it
	// cannot write) only through its logger, which NoLog leaves unset.
	errs := &startErrors{fatal: make(chan struct{})}
	if o.Log != nil {
		errs.next = logging.NATS(o.Log)
	}
	s.SetLoggerV2(errs, false, false, false)
	go s.Start()
	deadline := time.Now().Add(10 * time.Second)
	for !s.ReadyForConnections(50 * time.Millisecond) {
		select {
		case <-errs.fatal:
			s.Shutdown()
			return nil, fmt.Errorf("embedded NATS server: %s", errs.String())
		default:
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			if e := errs.String(); e != "" {
				return nil, fmt.Errorf("embedded NATS server not ready after 10s (store %s): %s", o.StoreDir, e)
			}
			return nil, fmt.Errorf("embedded NATS server not ready after 10s (store %s)", o.StoreDir)
		}
	}
	return s, nil
}

// startErrors is the embedded server's logger: it keeps the first errors,
// which say why a server that never becomes ready failed to start, closes
// fatal on a fatal one, and passes every line on to next.
type startErrors struct {
	// next receives every line as well (nil: none).
	next  *logging.NATSLogger
	mu    sync.Mutex
	msgs  []string
	fatal chan struct{}
	once  sync.Once
}

func (e *startErrors) add(format string, v []any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.msgs) < 8 {
		e.msgs = append(e.msgs, fmt.Sprintf(format, v...))
	}
}

func (e *startErrors) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.msgs, "; ")
}

func (e *startErrors) Fatalf(format string, v ...any) {
	e.add(format, v)
	if e.next != nil {
		e.next.Fatalf(format, v...)
	}
	e.once.Do(func() { close(e.fatal) })
}

func (e *startErrors) Errorf(format string, v ...any) {
	e.add(format, v)
	if e.next != nil {
		e.next.Errorf(format, v...)
	}
}

func (e *startErrors) Noticef(format string, v ...any) {
	if e.next != nil {
		e.next.Noticef(format, v...)
	}
}

func (e *startErrors) Warnf(format string, v ...any) {
	if e.next != nil {
		e.next.Warnf(format, v...)
	}
}

func (e *startErrors) Debugf(string, ...any) {}
func (e *startErrors) Tracef(string, ...any) {}

// ConnectInProcess connects to an embedded server without a socket.
// Extra options (credentials) come last.
func ConnectInProcess(s *server.Server, name string, opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect("", append([]nats.Option{nats.InProcessServer(s), nats.Name(name), nats.MaxReconnects(-1)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connecting to embedded NATS server: %w", err)
	}
	return nc, nil
}
