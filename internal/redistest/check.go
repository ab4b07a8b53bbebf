package redistest

import (
	"fmt"
	"os"
	"testing"
)

// MainCheck is Main with a check that runs after the tests have passed and
// the server has stopped, such as goleak.Find: by then the server's own
// goroutines are gone, so only the package's leaks remain. An error from
// check fails the run.
//
//	func TestMain(m *testing.M) {
//		redistest.MainCheck(m, &srv, func() error { return goleak.Find() })
//	}
func MainCheck(m *testing.M, s **Server, check func() error) {
	srv, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*s = srv
	code := m.Run()
	srv.Close()
	if code == 0 && check != nil {
		if err := check(); err != nil {
			fmt.Fprintf(os.Stderr, "redistest: after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
