package invalidate_test

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// proxy is a loopback TCP proxy that can turn its connections into black
// holes: open, but nothing gets through, as with a peer that froze or a
// network path that broke without a reset.
type proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	accepted atomic.Int64 // connections accepted

	mu     sync.Mutex
	closed bool
	pipes  []*pipe
}

type pipe struct {
	client, server net.Conn
	held           atomic.Bool
}

// startProxy starts a proxy to target, closed when t ends.
func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the address to dial instead of the target.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// Hold turns every connection open now into a black hole; later ones pass.
func (p *proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pp := range p.pipes {
		pp.held.Store(true)
	}
}

// Cut closes every connection open now, as a CLIENT KILL or a reset does;
// later ones pass.
func (p *proxy) Cut() {
	p.mu.Lock()
	pipes := p.pipes
	p.pipes = nil
	p.mu.Unlock()
	for _, pp := range pipes {
		pp.client.Close()
		pp.server.Close()
	}
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		pp := &pipe{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.pipes = append(p.pipes, pp)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.copy(pp, pp.server, pp.client)
		go p.copy(pp, pp.client, pp.server)
	}
}

// copy forwards src to dst until either end closes; while held, it reads
// and drops.
func (p *proxy) copy(pp *pipe, dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !pp.held.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	pipes := p.pipes
	p.pipes = nil
	p.mu.Unlock()
	p.ln.Close()
	for _, pp := range pipes {
		pp.client.Close()
		pp.server.Close()
	}
	p.wg.Wait()
}
