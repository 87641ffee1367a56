//go:build linux

package crosshost

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/proc"
	"github.com/rdmamgr/rdmamgr/test/netns"
)

// credEnv is the attacker's credentials: host h's certificate from c.
func credEnv(c creds, h string) []string {
	return []string{"CA=" + filepath.Join(c.dir, "ca.crt"), "CERT=" + filepath.Join(c.dir, h+".crt"), "TLSKEY=" + filepath.Join(c.dir, h+".key")}
}

// Issue 24 rows 1 and 2: host c, with its own valid certificate, ran
// `serve --member b` and took b's name (a bench to b ran against c, b
// vanished from the directory); anyone who could write to etcd wrote or
// deleted b's record, and every follower dropped its routes to b. Now a
// member registers only under its certificate's name, etcd takes only
// clients with a certificate from the deployment CA, records are signed by
// their member and verified by followers, and a member restores its record
// when another writer overwrites or removes it; a verified bench by name
// runs through it all and reaches the real b.
func TestAttackMemberName(t *testing.T) {
	nt := netns.New(t, 3)
	h1, h2, h3 := nt.Hosts[0], nt.Hosts[1], nt.Hosts[2]
	c := makeCreds(t, nt.Hosts)
	ep, _ := startEtcd(t, h1, c)
	waitEtcd(t, h2, ep, c)
	cluster := []string{"--etcd", ep, "--cluster", "t"}
	b := serve(t, h2, cat([]string{"--listen", ":7000", "--member", h2.Name}, cluster, c.flags(h2))...)

	// Host c claims b's name with its own certificate: refused at start.
	out, err := run(t, h3, 30*time.Second, cat([]string{"serve", "--backend", "tcp", "--listen", ":7001", "--member", h2.Name}, cluster, c.flags(h3))...)
	if err == nil || !strings.Contains(out, "registers only under its certificate's name") {
		t.Fatalf("serve --member %s with %s's certificate: %v\n%s", h2.Name, h3.Name, err, out)
	}
	// c serves under its own name (a member gone rogue holds valid etcd
	// credentials).
	rogue := serve(t, h3, cat([]string{"--listen", ":7000"}, cluster, c.flags(h3))...)

	// A verified bench to b by name runs while the attacks go on.
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	bout := &proc.Buffer{}
	bspec := spec(h1, bout, rdmamgrBin, cat([]string{"bench", "--peer", h2.Name, "--op", "put", "--size", "256KiB",
		"--count", "4000", "--concurrency", "2", "--verify", "--backend", "tcp", "--timeout", "100s"}, cluster, c.flags(h1))...)
	bdone := make(chan error, 1)
	go func() { bdone <- proc.Run(ctx, bspec) }()
	time.Sleep(2 * time.Second)

	key := "/rdmamgr/t/members/" + h2.Name
	forged, _ := json.Marshal(map[string]string{"name": h2.Name, "address": rogue.addr, "manager": "rdma-manager"})
	// Without credentials: etcd refuses.
	for _, op := range []string{"etcd-put", "etcd-delete"} {
		if out, ok := attacker(t, h3, "ATTACK="+op, "EP="+ep, "KEY="+key, "VALUE="+string(forged)); ok {
			t.Fatalf("%s without credentials went through:\n%s", op, out)
		}
	}
	// With c's valid credentials: the writes land, followers ignore the
	// forgery, and b writes its record back.
	for i := 0; i < 3; i++ {
		for _, op := range []string{"etcd-put", "etcd-delete"} {
			if out, ok := attacker(t, h3, append(credEnv(c, h3.Name), "ATTACK="+op, "EP="+ep, "KEY="+key, "VALUE="+string(forged))...); !ok {
				t.Fatalf("%s with a member's credentials: %s", op, out)
			}
		}
	}
	if err := <-bdone; err != nil || !strings.Contains(bout.String(), "verify: ok") {
		t.Fatalf("bench to %s by name through the attacks: %v\n%s", h2.Name, err, bout)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := members(t, h1, ep, c)
		if err == nil && strings.Contains(out, h2.Name+" "+b.addr+" ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listed at its own address after the attacks: %v\n%s", h2.Name, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(b.log.String(), "restoring it") {
		t.Errorf("%s did not say it restored its record:\n%s", h2.Name, b.log)
	}
	// The bench reached b, not c.
	out, err = run(t, h1, 30*time.Second, cat([]string{"status", "--peer", rogue.addr}, c.flags(h1))...)
	if err != nil || !strings.Contains(out, "served for peers: 0 ops") {
		t.Fatalf("the rogue member served the bench to %s: %v\n%s", h2.Name, err, out)
	}
	bench(t, h1, h2.Name, "get", cat(cluster, c.flags(h1))...)
}

// Issue 24 row 11: host b's valid certificate used from host c's address
// got requests served, and the client hung 60 s on the replies. Now the
// server refuses such a client at the TLS handshake, and the CLI says why
// at once.
func TestAttackCertFromAnotherHost(t *testing.T) {
	nt := netns.New(t, 3)
	h1, h2, h3 := nt.Hosts[0], nt.Hosts[1], nt.Hosts[2]
	c := makeCreds(t, nt.Hosts)
	d := serve(t, h1, cat([]string{"--listen", ":7000"}, c.flags(h1))...)

	// The CLI on h3 with h2's certificate: refused at once, saying why.
	start := time.Now()
	out, err := run(t, h3, 60*time.Second, cat([]string{"bench", "--peer", d.addr, "--op", "put", "--size", "1MiB",
		"--count", "4", "--backend", "tcp", "--timeout", "30s"}, c.flags(h2))...)
	if err == nil || !strings.Contains(out, "not "+h3.Addr) || !strings.Contains(out, "--host "+h2.Name+"="+h3.Addr) {
		t.Fatalf("bench from %s with %s's certificate: %v\n%s", h3.Name, h2.Name, err, out)
	}
	t.Logf("refused after %v: %s", time.Since(start).Round(time.Millisecond), lastLine(out))
	// A raw TLS client on h3 with h2's certificate: the server refuses it.
	if out, ok := attacker(t, h3, append(credEnv(c, h2.Name), "ATTACK=tls", "EP="+d.addr)...); ok {
		t.Fatalf("TLS with %s's certificate from %s was accepted:\n%s", h2.Name, h3.Addr, out)
	} else if !strings.Contains(out, "bad certificate") {
		t.Fatalf("TLS with another host's certificate: want the server's bad-certificate alert:\n%s", out)
	}
	// Legitimate: h3 with its own certificate, verified; the refusal
	// counted.
	bench(t, h3, d.addr, "put", c.flags(h3)...)
	out, err = run(t, h3, 30*time.Second, cat([]string{"status", "--peer", d.addr, "--json"}, c.flags(h3))...)
	if err != nil || !strings.Contains(out, `"tls":`) {
		t.Fatalf("status: want the refusal counted under tls: %v\n%s", err, out)
	}
}
