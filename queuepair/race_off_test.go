//go:build !race

package queuepair

const raceEnabled = false
