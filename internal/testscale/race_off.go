//go:build !race

package testscale

// Race reports whether the race detector is on.
const Race = false
