// Package faultproxy is a loopback TCP proxy that puts network faults
// between a client and a server, for tests: added latency, a black hole
// (connections stay open, nothing gets through) and a cut (every connection
// closed, new ones refused).
//
// A Proxy starts passing traffic. Its fault can be changed at any time and
// applies at once to every connection, open or new:
//
//   - Pass forwards everything; bytes held by a black hole flow again.
//   - Delay forwards every chunk read from either side after a pause, so a
//     request and its reply each take that much longer.
//   - BlackHole accepts connections and keeps them open but forwards
//     nothing, as a frozen peer or a broken network path without a reset
//     would. What was sent meanwhile is held (a chunk in the proxy, the
//     rest in the kernel's buffers) and delivered once traffic passes again,
//     as TCP would after a partition heals.
//   - Cut closes every connection and the listener, so that a new
//     connection is refused; Pass, Delay or BlackHole listen again on the
//     same address.
package faultproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Fault is what a Proxy does to traffic.
type Fault int

// The faults a Proxy can apply.
const (
	Pass      Fault = iota // forward everything
	Delay                  // forward every chunk after a pause
	BlackHole              // keep connections, forward nothing
	Cut                    // close connections, refuse new ones
)

func (f Fault) String() string {
	switch f {
	case Pass:
		return "pass"
	case Delay:
		return "delay"
	case BlackHole:
		return "black hole"
	case Cut:
		return "cut"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Proxy forwards TCP connections from its loopback address to a target,
// applying its current Fault. Create it with Start and stop it with Close.
type Proxy struct {
	addr   string
	target string

	mu     sync.Mutex
	fault  Fault
	delay  time.Duration
	change chan struct{} // closed, and replaced, whenever the fault changes
	ln     net.Listener  // nil while cut or closed
	links  map[*link]struct{}
	closed bool

	wg       sync.WaitGroup // accept loops and copiers
	accepted atomic.Int64
	forward  atomic.Int64 // bytes forwarded, both ways
}

// link is one proxied connection: the client's and the server's ends.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed by close
	copiers        sync.WaitGroup
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		l.client.Close()
		l.server.Close()
	})
}

// Start returns a Proxy to target (host:port) listening on a free loopback
// port, passing traffic.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{
		addr:   ln.Addr().String(),
		target: target,
		change: make(chan struct{}),
		ln:     ln,
		links:  make(map[*link]struct{}),
	}
	p.wg.Add(1)
	go p.serve(ln)
	return p, nil
}

// Addr is the address to dial instead of the target.
func (p *Proxy) Addr() string { return p.addr }

// Fault returns the current fault.
func (p *Proxy) Fault() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

// Conns is the number of connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Accepted is the number of connections accepted since Start.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Forwarded is the number of bytes forwarded since Start, both ways.
func (p *Proxy) Forwarded() int64 { return p.forward.Load() }

// Pass forwards everything from now on, listening again after a Cut.
func (p *Proxy) Pass() error { return p.set(Pass, 0) }

// Delay forwards every chunk d after it was read, both ways, listening
// again after a Cut. A request and its reply each take d longer.
func (p *Proxy) Delay(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("faultproxy: Delay(%v): not positive", d)
	}
	return p.set(Delay, d)
}

// BlackHole keeps connections open, and accepts new ones, but forwards
// nothing until the fault changes; after a Cut it listens again.
func (p *Proxy) BlackHole() error { return p.set(BlackHole, 0) }

// Cut closes every connection and stops listening, so that new
// connections are refused. It returns once every connection is closed.
func (p *Proxy) Cut() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.fault, p.delay = Cut, 0
	close(p.change)
	p.change = make(chan struct{})
	ln := p.ln
	p.ln = nil
	links := p.takeLinks()
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	closeAll(links)
}

// Close stops the proxy: it closes the listener and every connection and
// waits for its goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.change)
	ln := p.ln
	p.ln = nil
	links := p.takeLinks()
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	closeAll(links)
	p.wg.Wait()
	return nil
}

// takeLinks empties p.links and returns what it held. Call with p.mu held.
func (p *Proxy) takeLinks() []*link {
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	clear(p.links)
	return links
}

// closeAll closes links and waits until their copiers have stopped.
func closeAll(links []*link) {
	for _, l := range links {
		l.close()
	}
	for _, l := range links {
		l.copiers.Wait()
	}
}

// set changes the fault to f (not Cut), listening again if cut.
func (p *Proxy) set(f Fault, d time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("faultproxy: closed")
	}
	if p.ln == nil {
		ln, err := relisten(p.addr)
		if err != nil {
			return err
		}
		p.ln = ln
		p.wg.Add(1)
		go p.serve(ln)
	}
	p.fault, p.delay = f, d
	close(p.change)
	p.change = make(chan struct{})
	return nil
}

// relisten listens on addr again, retrying for a while: the port was ours
// until the cut, but the kernel may take a moment to release it.
func relisten(addr string) (net.Listener, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("faultproxy: listen again on %s: %w", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serve accepts connections on ln until it is closed.
func (p *Proxy) serve(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, server: s, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed || p.fault == Cut || p.ln != ln {
			p.mu.Unlock()
			l.close()
			continue
		}
		p.links[l] = struct{}{}
		p.wg.Add(2)
		l.copiers.Add(2)
		p.mu.Unlock()
		go p.copy(l, l.server, l.client)
		go p.copy(l, l.client, l.server)
	}
}

// copy forwards src to dst, applying the fault to every chunk, until
// either end closes or the link is cut.
func (p *Proxy) copy(l *link, dst, src net.Conn) {
	defer p.wg.Done()
	defer l.copiers.Done()
	defer p.drop(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			read := time.Now()
			if !p.admit(l, read) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			p.forward.Add(int64(n))
		}
		if err != nil {
			return
		}
	}
}

// admit waits until a chunk read at read may be forwarded: at once when
// passing, after the delay, never while black-holed. It reports false when
// the link is gone.
func (p *Proxy) admit(l *link, read time.Time) bool {
	for {
		p.mu.Lock()
		f, d, change, closed := p.fault, p.delay, p.change, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		switch f {
		case Pass:
			return true
		case Delay:
			wait := time.Until(read.Add(d))
			if wait <= 0 {
				return true
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				return true
			case <-change:
				t.Stop() // the fault changed: look again
			case <-l.done:
				t.Stop()
				return false
			}
		case BlackHole:
			select {
			case <-change:
			case <-l.done:
				return false
			}
		default: // Cut, or closed
			return false
		}
	}
}

// drop closes l and forgets it.
func (p *Proxy) drop(l *link) {
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}
