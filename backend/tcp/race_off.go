//go:build !race

package tcp

// raceEnabled: built with -race (race_on.go).
const raceEnabled = false
