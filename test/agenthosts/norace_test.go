//go:build linux && !race

package agenthosts

const raceEnabled = false
