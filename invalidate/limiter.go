package invalidate

import "time"

// logEvery is the least time between two log lines of one kind
// (connection lost, reconnect failed, reconnected) during an outage.
const logEvery = 30 * time.Second

// limiter lets one event through per period and counts the others.
type limiter struct {
	every      time.Duration
	last       time.Time
	suppressed int
}

// allow reports whether to log now, and how many events were held back
// since the last one logged.
func (l *limiter) allow() (suppressed int, ok bool) {
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		return 0, false
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return n, true
}
