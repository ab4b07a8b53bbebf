//go:build race

package l1_test

// raceEnabled: the race detector slows a replay about 25 times.
const raceEnabled = true
