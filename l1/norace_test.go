//go:build !race

package l1_test

const raceEnabled = false
