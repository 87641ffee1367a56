// Package proc runs the helper processes of rdmamgr's benchmark and tests:
// `rdmamgr serve`, the plain-TCP baseline server, a bench run beside a
// test. It is the one place that starts a child, waits for its ready line,
// pins it to a CPU and ends it.
//
// A server child announces itself with one line "ready ADDR" on stdout once
// it serves; Start returns when that line arrives (Proc.Addr holds ADDR),
// and fails when the child exits first, ctx ends or Spec.ReadyTimeout
// passes. Spawn starts a child without waiting for a line; Run runs one to
// its end (killed if ctx ends first). Build compiles the binary the tests
// run, and Buffer collects a child's output safely. Every child gets
// Spec.DeathSignal (default SIGKILL) if this process dies, so none
// outlives a crashed test or benchmark (Linux).
//
// Each Proc has one goroutine, started with it, that waits for it and ends
// when it has exited and its stdout is drained. Stop ends it politely
// (SIGTERM, then SIGKILL after a grace period) and reports an exit status
// other than 0; Kill ends it at once, and its status is then not a
// failure.
//
// CPU placement (Linux; elsewhere ErrNoAffinity): AllowedCPUs lists the
// CPUs this process may use, PinSelf pins every thread of this process,
// and Spec.Pin runs a child on one CPU (through taskset(1) when installed,
// else by pinning its threads right after it starts).
package proc
