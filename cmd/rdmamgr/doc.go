// Command rdmamgr is the rdmamgr daemon and its command-line tools.
//
//	rdmamgr serve  --listen HOST:PORT       run a manager; prints "ready ADDR"
//	rdmamgr demo                             two managers, bytes moved both ways and verified
//	rdmamgr bench  --peer ADDR --op put|get --size SIZE --count N [--concurrency C] [--verify]
//	rdmamgr bench  --baseline [--sizes LIST] [--placement any|same|split]   ours vs plain Go TCP, with ratios
//	rdmamgr status --peer ADDR               a manager's buffers, routes and counters
//	rdmamgr devices                          RDMA devices this build can use
//
// ADDR is a manager's actor-system address (host:port); the manager's actor
// name defaults to rdma-manager (--peer-name to change it). Logs go to
// stderr through zerolog; results go to stdout. Exit status is non-zero on
// any error.
package main
