package faults

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wstream/wstream/internal/testmod"
	"github.com/wstream/wstream/tenant"
)

// build builds the wstream CLI and the nats-server of the module the
// project requires into dir.
func build(dir string) (wstream, natsServer string, err error) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	wstream, natsServer = filepath.Join(dir, "wstream"), filepath.Join(dir, "nats-server")
	for _, b := range [][]string{{wstream, "./cmd/wstream"}, {natsServer, "github.com/nats-io/nats-server/v2"}} {
		cmd := exec.Command(goBin, "build", "-o", b[0], b[1])
		cmd.Dir = testmod.Root()
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go build %s: %v\n%s", b[1], err, out)
		}
	}
	return wstream, natsServer, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// proc is one process of the cluster, started again (same arguments,
// same log file, appended) after it was killed or exited.
type proc struct {
	name string
	bin  string
	args []string
	dir  string
	log  string // its stdout and stderr, every run appended

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	out     *logFile
	stopped bool // SIGSTOPped
	down    bool // killed by the nemesis, not to be restarted by the supervisor
	starts  int
	err     error // how the last run ended
}

// logFile is a process's log file that also keeps the current run's
// output in memory.
type logFile struct {
	mu  sync.Mutex
	f   *os.File
	cur strings.Builder
}

func (l *logFile) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur.Write(b)
	return l.f.Write(b)
}

func (l *logFile) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur.String()
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(f, "=== %s: start %d of %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), p.starts, p.name, strings.Join(p.args, " "))
	out := &logFile{f: f}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		out.mu.Lock()
		fmt.Fprintf(f, "=== %s: %s exited: %v\n", time.Now().UTC().Format(time.RFC3339Nano), p.name, err)
		f.Close()
		out.mu.Unlock()
		close(done)
	}()
	p.cmd, p.done, p.out, p.stopped, p.down = cmd, done, out, false, false
	return nil
}

func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// output is the current run's output.
func (p *proc) output() string {
	p.mu.Lock()
	out := p.out
	p.mu.Unlock()
	if out == nil {
		return ""
	}
	return out.String()
}

// kill sends SIGKILL (continuing a stopped process first is not needed:
// SIGKILL ends it) and waits until it is gone; down keeps the supervisor
// from starting it again until the nemesis does.
func (p *proc) kill(down bool) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.down = down
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

func (p *proc) signal(s syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return errors.New("not started")
	}
	p.stopped = s == syscall.SIGSTOP
	return p.cmd.Process.Signal(s)
}

// exitErr is how the last run ended.
func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// isDown says whether the nemesis holds the process down.
func (p *proc) isDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

// natsNode is one nats-server process of the cluster, with its config.
type natsNode struct {
	*proc
	port, route int
}

// writeNATSConfig writes node i's configuration: JetStream syncing every
// write, routes to the other nodes, and no advertising of the cluster's
// addresses, so that clients stay behind their proxies.
// With auth, the node trusts the tenant authority's operator, with a
// resolver of its own.
func writeNATSConfig(dir string, i int, ports, routes []int, auth *tenant.Authority) (string, error) {
	var rs []string
	for j, r := range routes {
		if j != i {
			rs = append(rs, fmt.Sprintf("nats-route://127.0.0.1:%d", r))
		}
	}
	conf := fmt.Sprintf(`server_name: n%d
listen: 127.0.0.1:%d
jetstream {
  store_dir: %q
  sync_interval: always
}
cluster {
  name: faults
  listen: 127.0.0.1:%d
  no_advertise: true
  routes: [%s]
}
`, i, ports[i], filepath.Join(dir, fmt.Sprintf("n%d-store", i)), routes[i], strings.Join(rs, ", "))
	if auth != nil {
		conf += auth.ServerConfig(filepath.Join(dir, fmt.Sprintf("n%d-jwt", i)))
	}
	path := filepath.Join(dir, fmt.Sprintf("n%d.conf", i))
	return path, os.WriteFile(path, []byte(conf), 0o644)
}
