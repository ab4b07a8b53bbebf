package hybrid

import "errors"

// ErrClosed is returned by every method of a Cache after Close. Check it
// with errors.Is.
var ErrClosed = errors.New("hybrid: cache closed")

// ErrEmptyKey is returned for an empty key. Check it with errors.Is.
var ErrEmptyKey = errors.New("hybrid: empty key")

// ErrReservedKey is returned for a key that starts with a NUL byte: such
// keys name the cache's own records (see DeleteByTag). Check it with
// errors.Is.
var ErrReservedKey = errors.New("hybrid: keys starting with a NUL byte are reserved")

// ErrKeyTooLong is returned for a key longer than Options.MaxKeyBytes.
// Check it with errors.Is.
var ErrKeyTooLong = errors.New("hybrid: key too long")

// ErrValueTooLarge is returned by Set when the encoded value exceeds
// Options.MaxValueBytes. Check it with errors.Is.
var ErrValueTooLarge = errors.New("hybrid: value too large")

// ErrPanic is wrapped by the error every waiter gets when a load function
// panics. Check it with errors.Is; the message holds the panic value.
var ErrPanic = errors.New("hybrid: load panicked")

// ErrNotFound says a key has no value. A load function returns an error
// wrapping it to say so; with Options.NegativeTTL the absence is then
// remembered. GetOrCreate returns an error wrapping it for a remembered
// absence, and for a key that a concurrent GetOrCreateMany was loading and
// whose load function did not return. Check it with errors.Is.
var ErrNotFound = errors.New("hybrid: not found")

// ErrQueued is wrapped, with Options.QueueWrites, by the error of a Set,
// Delete, DeleteByTag or Clear whose write to the shared tier failed and
// was queued for replay: L1 here has the change, other instances and the
// shared tier do not yet. The error wraps the original failure too. Check
// it with errors.Is(err, ErrQueued); a caller for whom a queued write is
// good enough may treat it as success.
var ErrQueued = errors.New("hybrid: write queued for replay")

// ErrUnavailable is returned by Set and Delete while the circuit breaker
// (Options.BreakerThreshold) keeps calls away from a failing shared tier.
// Check it with errors.Is.
var ErrUnavailable = errors.New("hybrid: shared tier unavailable (circuit breaker open)")

// ErrLeaseHolderFailed is wrapped by the error a fill's callers get when
// it waited for another instance's lease (Options.LoadLease) and that
// instance's load failed: the load is not run again here at once. With a
// Secret set, the error also carries the holder's error text. (A holder's
// load that found nothing gives the waiters an error wrapping ErrNotFound
// instead.) Check it with errors.Is.
var ErrLeaseHolderFailed = errors.New("hybrid: the lease holder's load failed")
