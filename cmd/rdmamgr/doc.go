// Command rdmamgr is the rdmamgr daemon and its command-line tools.
//
//	rdmamgr serve   [--listen HOST:PORT]       run a manager; prints "ready ADDR"; /metrics on 127.0.0.1:8091
//	rdmamgr demo                               two managers, bytes moved both ways and verified
//	rdmamgr bench   --peer ADDR [--op put|get] [--size SIZE] [--count N] [--json FILE]
//	rdmamgr bench   --baseline [--sizes LIST] [--placement any|same|split]   ours vs plain Go TCP, with ratios
//	rdmamgr baseline-server [--listen HOST:PORT]  the plain Go TCP server bench --baseline measures against
//	rdmamgr status  --peer ADDR [--json] [--watch INTERVAL]
//	rdmamgr devices                            RDMA devices this build can use
//	rdmamgr version
//	rdmamgr help [CMD]
//
// ADDR is a manager's actor-system address (host:port); the manager's actor
// name defaults to rdma-manager (--peer-name to change it). Every flag can
// also be set as an RDMAMGR_* environment variable. Logs go to stderr
// through zerolog; results and help go to stdout. Exit status: 0 success, 1
// failure, 2 usage error, 130 interrupted.
//
// The command line is one table of commands (cli.go): each registers its
// own flags, one line each, and dispatch handles help, errors, signals and
// exit codes for all of them. The commands are thin: the measuring of bench
// is package bench (and bench/baseline for --baseline), the processes bench
// --baseline starts and pins are internal/proc's.
package main
