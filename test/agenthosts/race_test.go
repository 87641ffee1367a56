//go:build linux && race

package agenthosts

// raceEnabled: this test binary (and so every worker) runs with the race
// detector; the agents are built with it too.
const raceEnabled = true
