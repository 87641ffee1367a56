// Package crosshost runs rdmamgr across real hosts: three network
// namespaces on one bridge (test/netns), a daemon per host, the CLI run
// inside the hosts, mutual TLS on the control plane and, where a test says
// so, on the data plane, and a real etcd (Debian's etcd-server) on h1 for
// membership, over TLS with client certificates from the deployment CA. All traffic stays between the namespaced hosts; every load
// is bounded by an operation count; namespaces are removed when a test
// ends, pass or fail.
//
//   - TestBytesAcrossHosts: wildcard binds (":P", "0.0.0.0:P", "[::]:P")
//     advertise the host's address; `bench --verify` puts and gets between
//     every pair of hosts, and with --data-tls.
//   - TestHostileAcrossHosts: a peer without credentials, or with a
//     certificate from another CA, gets no buffer, queue pair or status; a
//     daemon without credentials refuses a wildcard bind; a loopback reply
//     address toward another host is refused at once.
//   - TestKillRestartAcrossHosts and TestSoakAcrossHosts: SIGKILL and
//     restart at the same address; bounded verified load from two hosts.
//   - TestMembership: three hosts find each other by name through etcd; a
//     killed member leaves within its lease TTL (the time is logged); etcd
//     going away leaves a running transfer alone.
//   - TestLeaseEndsRoutes: a frozen member (SIGSTOP) loses its routes at a
//     client that follows the cluster when its lease ends: the transfer
//     fails with the peer gone, "membership lease ended".
//   - TestAttackMemberName (issue 24 rows 1, 2): host c cannot register as
//     b; etcd refuses a writer without credentials; with a member's valid
//     etcd credentials, forged and deleted records of b are ignored by
//     followers and restored by b, while a verified bench to b by name runs
//     through, reaching b and not c. The attacker is this test binary run
//     inside a host (attacker_test.go).
//   - TestAttackCertFromAnotherHost (row 11): b's certificate used from c's
//     address is refused at the TLS handshake, and the CLI says why at once.
//   - TestReadmeTwoHosts: README.md's "Two hosts" walk-through, its two sh
//     blocks read from the README at test time, runs line by line with bash
//     as written on hosts at the README's addresses (A 10.0.0.1, B 10.0.0.2,
//     etcd 10.0.0.3), each line on the host its comment names, each host
//     with its own HOME holding ca.crt and its own pair; every command exits
//     0 and every --verify bench checks out.
//   - TestBenchAcrossHosts (RDMAMGR_XBENCH=1): the README's table, plain
//     data plane against --data-tls.
//
// The tests skip where namespaces cannot be made, saying why, unless
// RDMAMGR_REQUIRE_NETNS=1 (set by .ci/run), which turns that into a failure.
package crosshost
