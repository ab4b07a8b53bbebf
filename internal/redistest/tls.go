package redistest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoTLS says the redis-server on PATH was built without TLS support
// (BUILD_TLS=no): it does not know the tls-port directive.
var ErrNoTLS = errors.New("redistest: redis-server was built without TLS support")

// TLSOptions configures StartTLS.
type TLSOptions struct {
	// Password, if set, is the default user's password (requirepass).
	Password string
}

// TLSServer is a redis-server of one test that accepts only TLS
// connections, with a certificate authority and a server certificate
// (for 127.0.0.1) that the test made.
type TLSServer struct {
	// Addr is host:port of the TLS listener; the server has no plain port.
	Addr string
	// Password is the default user's password, "" for none.
	Password string
	// Dir holds ca.crt, server.crt and server.key.
	Dir string

	roots *x509.CertPool
	cmd   *exec.Cmd
	out   *lockedBuffer
	gone  chan struct{} // closed when the process has been reaped
}

// StartTLS starts a TLS-only redis-server for tb, killed (by pid) when tb
// ends. It skips tb when there is no redis-server on PATH or it lacks TLS
// support, and fails it instead under HYBRID_REQUIRE_REDIS=1.
func StartTLS(tb testing.TB, o TLSOptions) *TLSServer {
	tb.Helper()
	s, err := startTLS(tb.TempDir(), o)
	switch {
	case err == nil:
		tb.Cleanup(s.kill)
		return s
	case errors.Is(err, exec.ErrNotFound):
		if RequireReal() && os.Getenv("HYBRID_REDIS_ADDR") == "" {
			tb.Fatalf("HYBRID_REQUIRE_REDIS=1 but no redis-server on PATH to start a TLS server: %v", err)
		}
		tb.Skipf("no redis-server on PATH to start a TLS server: %v", err)
	case errors.Is(err, ErrNoTLS):
		if RequireReal() {
			tb.Fatalf("HYBRID_REQUIRE_REDIS=1: %v", err)
		}
		tb.Skipf("TLS test not run: %v", err)
	default:
		tb.Fatalf("start a TLS redis-server: %v", err)
	}
	return nil
}

func startTLS(dir string, o TLSOptions) (*TLSServer, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	roots, err := writeCerts(dir)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &TLSServer{
			Addr:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			Password: o.Password,
			Dir:      dir,
			roots:    roots,
			out:      new(lockedBuffer),
			gone:     make(chan struct{}),
		}
		if lastErr = s.spawn(path, port); lastErr == nil {
			return s, nil
		}
		if errors.Is(lastErr, ErrNoTLS) {
			return nil, lastErr
		}
	}
	return nil, lastErr
}

func (s *TLSServer) spawn(path string, port int) error {
	args := []string{
		"--port", "0",
		"--tls-port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--tls-cert-file", filepath.Join(s.Dir, "server.crt"),
		"--tls-key-file", filepath.Join(s.Dir, "server.key"),
		"--tls-ca-cert-file", filepath.Join(s.Dir, "ca.crt"),
		"--tls-auth-clients", "no",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.Dir,
		"--loglevel", "warning",
	}
	if s.Password != "" {
		args = append(args, "--requirepass", s.Password)
	} else {
		args = append(args, "--protected-mode", "no")
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() {
		exited <- cmd.Wait()
		close(s.gone)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			out := s.out.String()
			if strings.Contains(out, "tls-port") || strings.Contains(out, "Bad directive") {
				return fmt.Errorf("%w (redis-server said: %s)", ErrNoTLS, strings.TrimSpace(out))
			}
			return fmt.Errorf("TLS redis-server on port %d exited: %v: %s", port, err, strings.TrimSpace(out))
		default:
		}
		if s.ping() == nil {
			s.cmd = cmd
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-s.gone
	return fmt.Errorf("TLS redis-server on port %d did not answer PING over TLS: %s", port, strings.TrimSpace(s.out.String()))
}

func (s *TLSServer) ping() error {
	o := s.Options()
	o.DialerRetries = 1
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	return c.Ping(ctx).Err()
}

// kill stops the server by its pid and waits until it is reaped.
func (s *TLSServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.gone
}

// TLSConfig returns a new client TLS configuration that trusts only the
// test's certificate authority and checks the server's certificate for
// 127.0.0.1.
func (s *TLSServer) TLSConfig() *tls.Config {
	return &tls.Config{RootCAs: s.roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// Options returns go-redis options for the server: its address, its TLS
// configuration and its password.
func (s *TLSServer) Options() *redis.Options {
	return &redis.Options{
		Addr:        s.Addr,
		TLSConfig:   s.TLSConfig(),
		Password:    s.Password,
		MaxRetries:  -1,
		DialTimeout: time.Second,
	}
}

// Client returns a go-redis client of the server, closed when tb ends.
func (s *TLSServer) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(s.Options())
	tb.Cleanup(func() { c.Close() })
	return c
}

// writeCerts makes a certificate authority and a server certificate for
// 127.0.0.1 signed by it, writes them to dir (ca.crt, server.crt,
// server.key) and returns a pool holding the authority.
func writeCerts(dir string) (*x509.CertPool, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	files := []struct {
		name, kind string
		der        []byte
	}{
		{"ca.crt", "CERTIFICATE", caDER},
		{"server.crt", "CERTIFICATE", der},
		{"server.key", "PRIVATE KEY", keyDER},
	}
	for _, f := range files {
		b := pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der})
		if err := os.WriteFile(filepath.Join(dir, f.name), b, 0o600); err != nil {
			return nil, err
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return roots, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
