//go:build linux

package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The shm attack suite (attack_shm_*_test.go) attacks a victim's shm
// socket from other processes of the host. An attacker that must run as
// another user is this test binary run again (attackerEnv names what it
// does) under that user's credentials.

// attackerEnv makes the test binary an attacker process (runAttacker)
// instead of running the tests; its value is the attack, then a space,
// then its argument.
const attackerEnv = "RDMAMGR_TEST_ATTACKER"

// nobody is the unprivileged user the attacks run as.
const nobody = 65534

// runAttacker runs the attack named by attackerEnv, if any, and reports
// whether it did (TestMain then exits with code).
func runAttacker() (code int, ran bool) {
	v := os.Getenv(attackerEnv)
	if v == "" {
		return 0, false
	}
	what, arg, _ := strings.Cut(v, " ")
	switch what {
	case "shm-flood":
		return shmFlood(arg), true
	}
	fmt.Fprintf(os.Stderr, "attacker: unknown attack %q\n", what)
	return 2, true
}

// shmFlood connects to the abstract socket arg as fast as it can and
// holds every connection, until stdin closes; it prints how many it
// holds every 100 ms ("held N failed M").
func shmFlood(arg string) int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	var held []net.Conn
	failed := 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			for _, c := range held {
				c.Close()
			}
			return 0
		case <-tick.C:
			fmt.Printf("held %d failed %d\n", len(held), failed)
		default:
		}
		if len(held) >= 16000 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		c, err := net.DialTimeout("unixpacket", arg, 100*time.Millisecond)
		if err != nil {
			failed++
			time.Sleep(time.Millisecond) // EMFILE, a full backlog: try again
			continue
		}
		held = append(held, c)
	}
}

// hostileProc is a running attacker process.
type hostileProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// startHostileProc runs this test binary as uid (and gid) nobody doing attack
// what with arg; it is stopped when the test ends.
func startHostileProc(t *testing.T, what, arg string) *hostileProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy nobody may run: the test binary's own directory is private.
	dir, err := os.MkdirTemp("", "rdmamgr-attacker-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "attacker")
	if err := copyFile(self, bin); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), attackerEnv+"="+what+" "+arg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	cmd.Stderr = os.Stderr
	a := &hostileProc{cmd: cmd, lines: make(chan string, 1024)}
	if a.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the attacker as uid %d: %v", nobody, err)
	}
	go func() {
		defer close(a.lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			select {
			case a.lines <- s.Text():
			default: // nobody reads: keep the latest only
				<-a.lines
				a.lines <- s.Text()
			}
		}
	}()
	t.Cleanup(func() { a.stop(t) })
	return a
}

// stop ends the attacker (stdin closed, then killed) and waits for it.
func (a *hostileProc) stop(t *testing.T) {
	if a.stdin == nil {
		return
	}
	a.stdin.Close()
	a.stdin = nil
	done := make(chan struct{})
	go func() { _ = a.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = a.cmd.Process.Kill()
		<-done
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// shmSocketOf returns the name ("@...") of the abstract shm socket the
// process pid listens on: the /proc/net/unix entry whose inode is one of
// its fds.
func shmSocketOf(t *testing.T, pid int) string {
	t.Helper()
	inodes := map[string]bool{}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		if ino, ok := strings.CutPrefix(l, "socket:["); ok && err == nil {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	tab, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(tab), "\n") {
		f := strings.Fields(line)
		if len(f) == 8 && inodes[f[6]] && strings.HasPrefix(f[7], "@rdmamgr-shm-") {
			return f[7]
		}
	}
	t.Fatalf("process %d listens on no shm socket", pid)
	return ""
}

// benchDoc is the part of `rdmamgr bench --json -` the attack tests read.
type benchDoc struct {
	Backend    string `json:"backend"`
	Ops        uint64 `json:"ops"`
	Errors     uint64 `json:"errors"`
	Mismatches uint64 `json:"mismatches"`
	Complete   bool   `json:"complete"`
}

// verifiedBench runs `rdmamgr bench --verify` against the victim over
// backend kind and fails the test unless every operation succeeded,
// verified, over that backend.
func verifiedBench(t *testing.T, v *atkVictim, kind string, count int) benchDoc {
	t.Helper()
	out, errOut, err := runRdmamgr(3*time.Minute, "bench", "--peer", v.d.addr, "--backend", kind, "--op", "put",
		"--size", "64KiB", "--count", strconv.Itoa(count), "--verify", "--json", "-")
	var doc benchDoc
	if jerr := json.Unmarshal([]byte(out), &doc); err != nil || jerr != nil {
		t.Fatalf("%s bench: %v (%v)\nstdout: %s\nstderr: %s", kind, err, jerr, out, errOut)
	}
	if doc.Backend != kind || !doc.Complete || doc.Errors != 0 || doc.Mismatches != 0 || doc.Ops != uint64(count) {
		t.Fatalf("%s bench: %+v, want %d verified operations over %s\nstderr: %s", kind, doc, count, kind, errOut)
	}
	return doc
}
