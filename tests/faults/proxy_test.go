package faults

import (
	"net"
	"sync"
	"time"
)

// proxy is a TCP fault proxy on 127.0.0.1 in front of one NATS node: the
// test partitions it (new connections refused, or every byte held back),
// adds latency to every byte in both directions, and cuts its existing
// connections.
type proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	refuse  bool          // close every new connection at once
	hole    bool          // forward nothing (a black hole); connections are cut when it heals
	latency time.Duration // added to every chunk, both directions
	conns   map[net.Conn]struct{}
}

func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.accept()
	return p, nil
}

func (p *proxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *proxy) close() {
	p.ln.Close()
	p.cut()
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		go p.serve(c)
	}
}

func (p *proxy) serve(c net.Conn) {
	s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go p.pipe(s, c, done)
	go p.pipe(c, s, done)
	<-done
	c.Close()
	s.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies from src to dst, each chunk delayed by the latency at the
// time it was read, in order; in a black hole chunks are dropped (the
// connection is cut when the hole heals, so no stream goes on with a gap).
func (p *proxy) pipe(dst, src net.Conn, done chan<- struct{}) {
	q := make(chan chunk, 256)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				p.mu.Lock()
				hole, lat := p.hole, p.latency
				p.mu.Unlock()
				if !hole {
					q <- chunk{b[:n], time.Now().Add(lat)}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range q {
		if d := time.Until(ch.due); d > 0 {
			time.Sleep(d)
		}
		if _, err := dst.Write(ch.b); err != nil {
			break
		}
	}
	// Unblock the reader on the way out.
	src.Close()
	for range q {
	}
	done <- struct{}{}
}

// cut closes every connection through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// partition refuses new connections and cuts the existing ones (refuse),
// or holds back every byte of every connection (hole).
func (p *proxy) partition(hole bool) {
	p.mu.Lock()
	p.refuse, p.hole = true, hole
	p.mu.Unlock()
	if !hole {
		p.cut()
	}
}

func (p *proxy) setLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// heal ends a partition and latency; a black hole's connections are cut.
func (p *proxy) heal() {
	p.mu.Lock()
	hole := p.hole
	p.refuse, p.hole, p.latency = false, false, 0
	p.mu.Unlock()
	if hole {
		p.cut()
	}
}
