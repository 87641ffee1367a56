//go:build race

package queuepair

const raceEnabled = true
