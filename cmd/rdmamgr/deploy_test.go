package main

import (
	"bytes"
	"context"
	"flag"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/internal/proc"
)

// refusal is a daemon that refuses its flags: exit 2, one line, nothing on
// stdout (issue 23).
func refusal(args []string, msg ...string) cliCase {
	return cliCase{args: args, code: 2, stderrHas: msg, stderrNot: []string{"Run 'rdmamgr help"}, stderrMax: 1, stdoutNone: true}
}

// Issue 23, point by point: flags a daemon cannot honour are refused at
// once; env values and flag values mean what the README says.
func TestDeployFlags(t *testing.T) {
	cases := map[string]cliCase{
		// 1: a non-loopback --listen without TLS bound 127.0.0.1 quietly.
		"serve_wildcard_without_tls":  refusal([]string{"serve", "--listen", "0.0.0.0:0"}, "--listen 0.0.0.0:0", "--tls-ca"),
		"serve_port_only_without_tls": refusal([]string{"serve", "--listen", ":0"}, "--tls-ca"),
		"serve_advertise_without_tls": refusal([]string{"serve", "--listen", "127.0.0.1:0", "--advertise", "10.0.0.1"}, "--advertise 10.0.0.1"),
		"serve_secret_is_not_tls": refusal([]string{"serve", "--listen", "0.0.0.0:0", "--secret-file", "/nonexistent"},
			"--tls-ca"),
		"secret_help_says_no_tls": {args: []string{"help", "serve"}, stdoutHas: []string{"It does not replace TLS"},
			stdoutNot: []string{"Without it, managers bind to loopback only"}},
		// 3: --data-listen; a wildcard one needs TLS as --listen does.
		"serve_data_listen_wildcard_without_tls": refusal([]string{"serve", "--data-listen", "0.0.0.0:0"}, "--data-listen"),
		"serve_data_listen_bad":                  usageErr([]string{"serve", "--data-listen", "nope"}, `--data-listen "nope"`),
		// 2: --shm-allow-uid takes ids and names.
		"shm_allow_uid_bad": usageErr([]string{"serve", "--shm-allow-uid", "no-such-user-xyz"}, "no such user"),
		// 10: sizes, bare seconds, yes/no.
		"max_message_size_takes_sizes": usageErr([]string{"serve", "--max-message-size", "2GiB"}, "want a size from 1B to 1GiB"),
		"watch_bare_seconds":           usageErr([]string{"status", "--watch", "-2", "--peer", "127.0.0.1:1"}, "--watch -2s"),
		"data_tls_yes_from_env": {args: []string{"serve"}, env: map[string]string{"RDMAMGR_DATA_TLS": "yes"}, code: 2,
			stderrHas: []string{"--data-tls needs --tls-ca"}, stderrNot: []string{"parse error"}},
		"version_revision_and_backends": {args: []string{"version"}, stdoutHas: []string{"backends tcp shm", "\nrevision "}},
		"data_tls_bad_from_env": {args: []string{"serve"}, env: map[string]string{"RDMAMGR_DATA_TLS": "maybe"}, code: 2,
			stderrHas: []string{"RDMAMGR_DATA_TLS", "yes/no"}},
	}
	for name, c := range cases {
		t.Run(name, c.run)
	}
}

// An empty RDMAMGR_* variable sets its flag to "" (RDMAMGR_METRICS_LISTEN=
// turns the admin listener off; ff skipped empty values), and is ignored
// for a flag that takes a number; a flag on the command line wins.
func TestEmptyEnvMeansEmpty(t *testing.T) {
	t.Setenv("RDMAMGR_METRICS_LISTEN", "")
	t.Setenv("RDMAMGR_CONNS", "")
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	ml := fs.String("metrics-listen", "auto", "")
	conns := fs.Int("conns", 4, "")
	emptyEnv(fs)
	if *ml != "" || *conns != 4 {
		t.Errorf("RDMAMGR_METRICS_LISTEN= RDMAMGR_CONNS=: --metrics-listen %q --conns %d, want \"\" and 4", *ml, *conns)
	}
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	ml = fs.String("metrics-listen", "auto", "")
	if err := fs.Parse([]string{"--metrics-listen", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	emptyEnv(fs)
	if *ml != "127.0.0.1:0" {
		t.Errorf("flag lost to an empty variable: %q", *ml)
	}
}

// --max-registered clamps --max-region and --max-remote left at their
// defaults: the CLI does not pass its own defaults over the library's
// clamp.
func TestMaxRegisteredClamps(t *testing.T) {
	var l limitFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	l.register(fs)
	if err := fs.Parse([]string{"--max-registered", "64MiB"}); err != nil {
		t.Fatal(err)
	}
	var cfg actor.Config
	if err := l.apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.RouteLinger != actor.DefaultRouteLinger {
		t.Errorf("--route-linger default: %v", cfg.RouteLinger)
	}
	if cfg.Limits.MaxBytes != 64<<20 || cfg.Limits.MaxRegion != 0 || cfg.MaxRemoteBytes != 0 {
		t.Errorf("--max-registered 64MiB: registered %d region %d remote %d; want 64MiB and both left to the library (0)",
			cfg.Limits.MaxBytes, cfg.Limits.MaxRegion, cfg.MaxRemoteBytes)
	}
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	l = limitFlags{}
	l.register(fs)
	if err := fs.Parse([]string{"--max-registered", "64MiB", "--max-region", "1MiB"}); err != nil {
		t.Fatal(err)
	}
	cfg = actor.Config{}
	if err := l.apply(&cfg); err != nil || cfg.Limits.MaxRegion != 1<<20 {
		t.Errorf("--max-region 1MiB: %d, %v", cfg.Limits.MaxRegion, err)
	}
}

// The admin listener's default never stops a second daemon: the --listen
// port + 1, or a free port for port 0.
func TestAdminFor(t *testing.T) {
	for listen, want := range map[string]string{
		"127.0.0.1:8090": "127.0.0.1:8091", "0.0.0.0:9000": "127.0.0.1:9001", "[::]:7000": "127.0.0.1:7001",
		"127.0.0.1:0": "127.0.0.1:0", "127.0.0.1:65535": "127.0.0.1:0",
	} {
		if got := adminFor(listen); got != want {
			t.Errorf("adminFor(%s) = %s, want %s", listen, got, want)
		}
	}
}

// Daemons with the default admin listener (no --metrics-listen): one at
// port P serves it at P+1; one whose P+1 is taken, and two at port 0, all
// start (a second daemon used to fail on 127.0.0.1:8091).
func TestSecondDaemonStartsWithDefaultAdmin(t *testing.T) {
	env := []string{"RDMAMGR_METRICS_LISTEN=auto"}
	serveAuto := func(listen string) *daemon {
		t.Helper()
		args := []string{"serve", "--listen", listen, "--log-level", "info"}
		d := &daemon{stderr: &proc.Buffer{}}
		p, err := proc.Start(context.Background(), proc.Spec{Name: "serve", Path: testBinary(t), Args: args, Env: env, Stderr: d.stderr})
		if err != nil {
			t.Fatalf("serve %v: %v\nstderr:\n%s", args, err, d.stderr)
		}
		d.Proc, d.addr = p, p.Addr
		t.Cleanup(func() { d.stop(t) })
		waitFor(t, "the serving line", func() bool { return metricsRE.MatchString(d.stderr.String()) })
		d.metrics = metricsRE.FindStringSubmatch(d.stderr.String())[1]
		return d
	}
	a, b := serveAuto("127.0.0.1:0"), serveAuto("127.0.0.1:0")
	if a.metrics == b.metrics {
		t.Fatalf("two daemons at port 0 share admin %s", a.metrics)
	}
	// A port P with P+1 free: admin at P+1. Then P+1 held by us: a free one.
	var held net.Listener
	var port int
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		probe, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port-1))
		if err == nil {
			probe.Close()
			held = ln
			break
		}
		ln.Close()
	}
	if held == nil {
		t.Skip("no two adjacent free ports")
	}
	defer held.Close()
	c := serveAuto("127.0.0.1:" + strconv.Itoa(port-1))
	if c.metrics == "" || c.metrics == held.Addr().String() {
		t.Errorf("daemon next to a taken admin port: metrics %q\n%s", c.metrics, c.stderr)
	}
	if !strings.Contains(c.stderr.String(), "admin port taken") {
		t.Errorf("no warning naming the taken admin port:\n%s", c.stderr)
	}
	held.Close()
	_ = c.Stop(20 * time.Second)
	d := serveAuto("127.0.0.1:" + strconv.Itoa(port-1))
	if want := "127.0.0.1:" + strconv.Itoa(port); d.metrics != want {
		t.Errorf("--listen 127.0.0.1:%d: admin %s, want %s", port-1, d.metrics, want)
	}
}

// TestSystemdUnitDeploys: contrib/rdmamgr.service loads its TLS credentials and secret with
// LoadCredential=, names the uids shm serves, scores ≤ 3.0 in
// systemd-analyze security, and its ExecStart line starts a daemon.
func TestSystemdUnitDeploys(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join(repoRoot, "contrib/rdmamgr.service"))
	if err != nil {
		t.Fatal(err)
	}
	u := string(unit)
	for _, want := range []string{"LoadCredential=ca.crt:", "LoadCredential=host.crt:", "LoadCredential=host.key:", "LoadCredential=secret:",
		"RDMAMGR_SHM_ALLOW_UID", "Type=notify"} {
		if !strings.Contains(u, want) {
			t.Errorf("unit lacks %s", want)
		}
	}
	exec1 := regexp.MustCompile(`(?m)^ExecStart=(\S+) (.*)$`).FindStringSubmatch(u)
	if exec1 == nil {
		t.Fatal("unit has no ExecStart=")
	}
	args := strings.Fields(exec1[2])
	for _, f := range []string{"--tls-ca", "--tls-cert", "--tls-key", "--secret-file"} {
		if v := lastValue(args, f); !strings.HasPrefix(v, "${CREDENTIALS_DIRECTORY}/") {
			t.Errorf("ExecStart %s %q: want a file under ${CREDENTIALS_DIRECTORY}", f, v)
		}
	}
	listen := lastValue(args, "--listen")
	if host, _, _ := strings.Cut(listen, ":"); host != "0.0.0.0" && host != "" {
		t.Errorf("ExecStart --listen %s: the unit serves other hosts", listen)
	}

	if path, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Log("no systemd-analyze: exposure not checked")
	} else {
		out, _ := exec.Command(path, "security", "--offline=yes", "--no-pager", filepath.Join(repoRoot, "contrib/rdmamgr.service")).CombinedOutput()
		m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("systemd-analyze security: no score:\n%s", out)
		}
		if score, _ := strconv.ParseFloat(string(m[1]), 64); score > 3.0 {
			t.Errorf("systemd-analyze security rates the unit %.1f, want ≤ 3.0:\n%s", score, out)
		}
	}

	// The ExecStart line, with the credentials systemd would hand it and
	// on a free loopback port, starts a daemon.
	creds := t.TempDir()
	var so, se bytes.Buffer
	if code := runCtx(context.Background(), []string{"certs", "--dir", creds, "--host", "host=127.0.0.1"}, &env{stdout: &so, stderr: &se}); code != 0 {
		t.Fatalf("certs: %d %s", code, se.String())
	}
	if err := os.WriteFile(filepath.Join(creds, "secret"), []byte("a unit test secret of enough bytes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var run []string
	for i := 1; i < len(args); i++ { // args[0] is "serve"
		if args[i] == "--listen" {
			i++
			continue
		}
		run = append(run, strings.ReplaceAll(args[i], "${CREDENTIALS_DIRECTORY}", creds))
	}
	d := startDaemonEnv(t, []string{"RDMAMGR_SHM_ALLOW_UID="}, run...)
	if !strings.Contains(d.stderr.String(), `"serving"`) {
		t.Errorf("unit's daemon did not log serving:\n%s", d.stderr)
	}
}

// makeTestCerts makes a CA and a certificate for 127.0.0.1 and returns the
// --tls-* flags.
func makeTestCerts(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	var so, se bytes.Buffer
	if code := runCtx(context.Background(), []string{"certs", "--dir", dir, "--host", "h=127.0.0.1"}, &env{stdout: &so, stderr: &se}); code != 0 {
		t.Fatalf("certs: %d %s", code, se.String())
	}
	return []string{"--tls-ca", filepath.Join(dir, "ca.crt"), "--tls-cert", filepath.Join(dir, "h.crt"), "--tls-key", filepath.Join(dir, "h.key")}
}

// The client says what went wrong, at once, and a healthy TLS server
// counts no refusal for the CLI's probe (issue 23 points 4 and 5: each
// printed "no answer within --timeout", and every status or bench counted
// a "tls" refusal).
func TestClientSaysWhatWentWrong(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mine, other := makeTestCerts(t), makeTestCerts(t)
	d := startDaemon(t, mine...)
	plain := startDaemon(t)
	st := func(peer string, extra ...string) (string, string, int) {
		return runBin(t, ctx, append([]string{"status", "--peer", peer, "--timeout", "30s"}, extra...)...)
	}
	for range 2 {
		if out, errOut, code := st(d.addr, mine...); code != 0 {
			t.Fatalf("status with the right credentials: exit %d\n%s%s", code, out, errOut)
		}
	}
	out, _, _ := st(d.addr, mine...)
	if strings.Contains(out, " tls ") || regexp.MustCompile(`(?m)^\s+tls\s+\d`).MatchString(out) {
		t.Errorf("status counted TLS refusals for the CLI's own probes:\n%s", out)
	}
	for name, c := range map[string]struct {
		peer  string
		flags []string
		want  string
	}{
		"no credentials":     {d.addr, nil, "requires TLS"},
		"another CA":         {d.addr, other, "not signed by --tls-ca"},
		"TLS to a plain one": {plain.addr, mine, "does not speak TLS"},
		"nothing listening":  {"127.0.0.1:1", nil, "connection refused"},
	} {
		_, errOut, code := st(c.peer, c.flags...)
		if code != 1 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "no answer within") {
			t.Errorf("%s: exit %d, want 1 and %q:\n%s", name, code, c.want, errOut)
		}
	}
}

// certs refuses a Go package directory or a git work tree without --force
// (the README had it write ca.key into the package certs/), and writes
// keys 0600, also over an existing file of a wider mode.
func TestCertsKeepsKeysOutOfRepositories(t *testing.T) {
	root := t.TempDir()
	pkg := filepath.Join(root, "pkg")
	repo := filepath.Join(root, "repo")
	for _, d := range []string{pkg, filepath.Join(repo, ".git")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(pkg, "x.go"), []byte("package pkg\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	usageErr([]string{"certs", "--dir", pkg, "--host", "h"}, "a Go package directory").run(t)
	usageErr([]string{"certs", "--dir", filepath.Join(repo, "tls"), "--host", "h"}, "git work tree").run(t)
	usageErr([]string{"certs", "--host", "h"}, "--dir is required").run(t)
	if _, err := os.Stat(filepath.Join(pkg, "ca.key")); err == nil {
		t.Fatal("refused certs wrote ca.key")
	}
	out := filepath.Join(root, "tls")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "h.key"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cliCase{args: []string{"certs", "--dir", out, "--host", "h"}, stdoutHas: []string{"h.key"}}.run(t)
	cliCase{args: []string{"certs", "--dir", filepath.Join(repo, "tls"), "--host", "h", "--force"}, stdoutHas: []string{"h.key"}}.run(t)
	for _, f := range []string{filepath.Join(out, "ca.key"), filepath.Join(out, "h.key"), filepath.Join(repo, "tls", "h.key")} {
		st, err := os.Stat(f)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", f, err, st.Mode().Perm())
		}
	}
	ign, err := os.ReadFile(filepath.Join(repoRoot, ".gitignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/secret", "*.key", "/tls/"} {
		if !strings.Contains(string(ign), p+"\n") {
			t.Errorf(".gitignore lacks %s", p)
		}
	}
}

// serve warns on a secret or key its group or others can read (the
// README's recipe made a 0644 secret, silently).
func TestServeWarnsOnReadableSecret(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("a readable secret of enough bytes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(secret, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	d := startDaemon(t, "--secret-file", secret)
	waitFor(t, "the serving line", func() bool { return strings.Contains(d.stderr.String(), "serving") })
	if !strings.Contains(d.stderr.String(), "readable by group or others") {
		t.Errorf("no warning for a 0644 secret:\n%s", d.stderr)
	}
}

// Console log lines carry the date, JSON ones sub-second time (issue 23
// point 10: "15:04:05" alone, and whole seconds).
func TestLogTimestamps(t *testing.T) {
	for _, c := range []struct {
		json bool
		re   string
	}{{false, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} `}, {true, `"time":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}`}} {
		var buf bytes.Buffer
		cm := common{logLevel: "info", logJSON: c.json}
		zl, _, err := cm.logger(&buf)
		if err != nil {
			t.Fatal(err)
		}
		zl.Info().Msg("hello")
		if !regexp.MustCompile(c.re).MatchString(buf.String()) {
			t.Errorf("json=%v: %q does not match %s", c.json, buf.String(), c.re)
		}
		// Durations carry their unit (they were bare milliseconds), through
		// the slog view the library logs with too.
		buf.Reset()
		_, sl, _ := cm.logger(&buf)
		sl.Info("waited", "took", 1500*time.Millisecond)
		if !strings.Contains(buf.String(), "1.5s") {
			t.Errorf("json=%v: a duration without its unit: %q", c.json, buf.String())
		}
	}
}
