//go:build race

package tcp

// raceEnabled: built with -race. Tests skip allocation counts then; the
// data path checks what a race build can afford to (settle).
const raceEnabled = true
