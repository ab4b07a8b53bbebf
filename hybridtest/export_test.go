package hybridtest

import (
	"os"
	"time"
)

// A mutant's process (see TestSuiteCatchesMutants) waits less for what a
// broken Remote never does: the double delivers and expires on time.
func init() {
	if os.Getenv("HYBRIDTEST_MUTANT") != "" {
		patience = 500 * time.Millisecond
	}
}
