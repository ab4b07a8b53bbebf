package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hybridcache/hybridcache/internal/faultproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer echoes every line back until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func start(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

// roundTrip sends line and reads the echo, waiting at most d.
func (c *client) roundTrip(line string, d time.Duration) (string, time.Duration, error) {
	start := time.Now()
	_ = c.c.SetDeadline(start.Add(d))
	if _, err := io.WriteString(c.c, line+"\n"); err != nil {
		return "", time.Since(start), err
	}
	got, err := c.r.ReadString('\n')
	return got, time.Since(start), err
}

func TestPassAndDelay(t *testing.T) {
	p := start(t)
	c := dial(t, p.Addr())
	if got, d, err := c.roundTrip("a", time.Second); err != nil || got != "a\n" {
		t.Fatalf("pass: got %q, %v after %v, want the echo", got, err, d)
	}
	const delay = 50 * time.Millisecond
	if err := p.Delay(delay); err != nil {
		t.Fatal(err)
	}
	got, d, err := c.roundTrip("b", time.Second)
	t.Logf("round trip with Delay(%v) each way: %v", delay, d)
	if err != nil || got != "b\n" {
		t.Fatalf("delay: got %q, %v, want the echo", got, err)
	}
	if d < 2*delay {
		t.Errorf("delay: round trip took %v, want at least %v", d, 2*delay)
	}
}

func TestBlackHoleHoldsThenDelivers(t *testing.T) {
	p := start(t)
	c := dial(t, p.Addr())
	if _, _, err := c.roundTrip("a", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.BlackHole(); err != nil {
		t.Fatal(err)
	}
	_, d, err := c.roundTrip("held", 150*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("black hole: got %v after %v, want a timeout", err, d)
	}
	// A new connection is accepted, but nothing gets through either.
	c2 := dial(t, p.Addr())
	if _, _, err := c2.roundTrip("x", 100*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("black hole, new connection: got %v, want a timeout", err)
	}
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	// The held line arrives once traffic passes again, as after a
	// partition heals.
	_ = c.c.SetDeadline(time.Now().Add(time.Second))
	if got, err := c.r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after the black hole: got %q, %v, want the held line", got, err)
	}
	t.Logf("accepted %d connections, forwarded %d bytes", p.Accepted(), p.Forwarded())
}

func TestCutRefusesThenListensAgain(t *testing.T) {
	p := start(t)
	c := dial(t, p.Addr())
	if _, _, err := c.roundTrip("a", time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if _, _, err := c.roundTrip("b", time.Second); err == nil {
		t.Fatal("cut: round trip on an old connection succeeded, want an error")
	}
	if n := p.Conns(); n != 0 {
		t.Errorf("cut: %d connections open, want 0", n)
	}
	if conn, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		conn.Close()
		t.Fatal("cut: a new connection was accepted, want it refused")
	}
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, p.Addr())
	if got, _, err := c2.roundTrip("c", time.Second); err != nil || got != "c\n" {
		t.Fatalf("after the cut: got %q, %v, want the echo", got, err)
	}
}
