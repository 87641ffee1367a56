package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// cliCase runs the command line in the test process and checks what it
// printed and how it exited.
type cliCase struct {
	args       []string
	env        map[string]string
	code       int
	stdoutHas  []string
	stdoutNot  []string
	stderrHas  []string
	stderrNot  []string
	stderrMax  int // most lines on stderr (0: no bound)
	stdoutNone bool
}

func (c cliCase) run(t *testing.T) {
	t.Helper()
	for k, v := range c.env {
		t.Setenv(k, v)
	}
	var stdout, stderr bytes.Buffer
	code := runCtx(context.Background(), c.args, &env{stdout: &stdout, stderr: &stderr})
	out, errOut := stdout.String(), stderr.String()
	if code != c.code {
		t.Errorf("rdmamgr %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(c.args, " "), code, c.code, out, errOut)
	}
	for _, s := range c.stdoutHas {
		if !strings.Contains(out, s) {
			t.Errorf("stdout lacks %q:\n%s", s, out)
		}
	}
	for _, s := range c.stdoutNot {
		if strings.Contains(out, s) {
			t.Errorf("stdout has %q:\n%s", s, out)
		}
	}
	for _, s := range c.stderrHas {
		if !strings.Contains(errOut, s) {
			t.Errorf("stderr lacks %q:\n%s", s, errOut)
		}
	}
	for _, s := range c.stderrNot {
		if strings.Contains(errOut, s) {
			t.Errorf("stderr has %q:\n%s", s, errOut)
		}
	}
	if n := strings.Count(errOut, "\n"); c.stderrMax > 0 && n > c.stderrMax {
		t.Errorf("stderr has %d lines, want at most %d:\n%s", n, c.stderrMax, errOut)
	}
	if c.stdoutNone && out != "" {
		t.Errorf("stdout not empty:\n%s", out)
	}
}

// usageErr is a usage error: exit 2, the message and a hint, nothing else.
func usageErr(args []string, msg string) cliCase {
	return cliCase{args: args, code: 2, stderrHas: []string{msg, "Run 'rdmamgr help"}, stderrMax: 2, stdoutNone: true}
}

// TestCLIDefects has one case per defect of the command line that issue 13
// lists; the case name says which.
func TestCLIDefects(t *testing.T) {
	cases := map[string]cliCase{
		// "no version anywhere (rdmamgr version, --version: unknown command)"
		"version_command": {args: []string{"version"}, stdoutHas: []string{"rdmamgr ", "module github.com/rdmamgr/rdmamgr", "go go1."}},
		"version_flag":    {args: []string{"--version"}, stdoutHas: []string{"rdmamgr "}},
		// "flag errors (--bogus, --count abc) exit 1, print the message twice and 37–67 lines of usage"
		"unknown_flag_exit2_one_line": usageErr([]string{"bench", "--bogus"}, "rdmamgr bench: unknown flag --bogus"),
		"bad_int_exit2_one_line":      usageErr([]string{"bench", "--peer", "127.0.0.1:1", "--count", "abc"}, `--count "abc": want a whole number`),
		"bad_duration_exit2":          usageErr([]string{"status", "--peer", "127.0.0.1:1", "--timeout", "soon"}, `--timeout "soon"`),
		// "CMD -h goes to stderr with no synopsis"
		"cmd_h_on_stdout_with_synopsis": {args: []string{"serve", "-h"}, stdoutHas: []string{"usage: rdmamgr serve ", "--listen HOST:PORT"}, stderrMax: 0},
		"cmd_help_on_stdout":            {args: []string{"bench", "--help"}, stdoutHas: []string{"usage: rdmamgr bench --peer ADDR"}},
		// "help serve ignores its argument"
		"help_cmd_shows_that_cmd": {args: []string{"help", "serve"}, stdoutHas: []string{"usage: rdmamgr serve", "--metrics-listen"}, stdoutNot: []string{"--peer "}},
		"help_unknown_cmd":        {args: []string{"help", "nosuch"}, code: 2, stderrHas: []string{`unknown command "nosuch"`}, stdoutNone: true},
		"help_lists_commands":     {args: []string{"help"}, stdoutHas: []string{"rdmamgr serve", "rdmamgr status", "rdmamgr version"}},
		"no_args_usage_exit2":     {args: nil, code: 2, stderrHas: []string{"usage:"}},
		"unknown_command":         {args: []string{"frobnicate"}, code: 2, stderrHas: []string{`unknown command "frobnicate"`}, stderrMax: 2},
		// "help shows --log-level (default "info") where the effective default is warn"
		"log_level_default_shown_is_effective_bench": {args: []string{"help", "bench"}, stdoutHas: []string{"(default warn) [$RDMAMGR_LOG_LEVEL]"}},
		"log_level_default_shown_is_effective_serve": {args: []string{"help", "serve"}, stdoutHas: []string{"(default info) [$RDMAMGR_LOG_LEVEL]"}},
		// "status -h lists flags it ignores"
		"status_help_lists_only_its_flags": {args: []string{"status", "-h"}, stdoutHas: []string{"--peer", "--timeout", "--json", "--watch"},
			stdoutNot: []string{"--backend", "--conns", "--chunk", "--sockbuf", "--rdma-device", "--max-registered", "--data-tls", "--lease-ttl", "--advertise"}},
		// "help lists flags a command ignores" (issue 23): members showed --advertise, --data-tls, --lease-ttl
		"members_help_lists_only_its_flags": {args: []string{"help", "members"}, stdoutHas: []string{"--etcd", "--cluster", "--tls-ca"},
			stdoutNot: []string{"--advertise", "--data-tls", "--lease-ttl", "--backend"}},
		"bench_help_has_no_lease":   {args: []string{"help", "bench"}, stdoutHas: []string{"--data-tls", "--peer"}, stdoutNot: []string{"--lease-ttl"}},
		"serve_help_has_lease":      {args: []string{"help", "serve"}, stdoutHas: []string{"--lease-ttl", "--data-tls"}},
		"devices_help_has_no_flags": {args: []string{"help", "devices"}, stdoutNot: []string{"--"}},
		// "extra positional arguments are silently ignored"
		"extra_argument_status":  usageErr([]string{"status", "--peer", "127.0.0.1:1", "now"}, `unexpected argument "now"`),
		"extra_argument_devices": usageErr([]string{"devices", "all"}, `unexpected argument "all"`),
		"extra_argument_serve":   usageErr([]string{"serve", "x"}, `unexpected argument "x"`),
		// "demo --rounds -3 reports 'verified 0 B: every byte matched' and exits 0"
		"demo_negative_rounds": usageErr([]string{"demo", "--rounds", "-3"}, "--rounds -3: want at least 1"),
		// "--size 1MB silently means 1 MiB" (TestParseSize has the table)
		"size_bare_suffix_refused": usageErr([]string{"bench", "--peer", "127.0.0.1:1", "--size", "1m"}, "KiB/MiB/GiB (powers of 2) or kB/MB/GB (powers of 10)"),
		"size_fraction_refused":    usageErr([]string{"demo", "--size", "1.5MiB"}, `size "1.5MiB"`),
		// "an unknown --log-level prints zerolog's 'defaulting to NoLevel' then exits 2"
		"unknown_log_level": {args: []string{"serve", "--log-level", "loud"}, code: 2, stderrHas: []string{`--log-level "loud": want one of debug, info, warn, error, disabled`},
			stderrNot: []string{"NoLevel"}, stderrMax: 2},
		// every flag also from RDMAMGR_* environment variables
		"env_var_sets_flag":        {args: []string{"demo"}, env: map[string]string{"RDMAMGR_ROUNDS": "-1"}, code: 2, stderrHas: []string{"--rounds -1: want at least 1"}},
		"env_var_bad_value":        {args: []string{"demo"}, env: map[string]string{"RDMAMGR_ROUNDS": "many"}, code: 2, stderrHas: []string{"RDMAMGR_ROUNDS"}},
		"flag_beats_env_var":       {args: []string{"demo", "--rounds", "-2"}, env: map[string]string{"RDMAMGR_ROUNDS": "-1"}, code: 2, stderrHas: []string{"--rounds -2"}},
		"help_names_env_vars":      {args: []string{"help", "serve"}, stdoutHas: []string{"[$RDMAMGR_MAX_REGISTERED]", "[$RDMAMGR_METRICS_LISTEN]"}},
		"bench_needs_peer":         usageErr([]string{"bench"}, "--peer is required"),
		"bench_bad_op":             usageErr([]string{"bench", "--peer", "127.0.0.1:1", "--op", "cas"}, `--op "cas": want put or get`),
		"bench_negative_max_errs":  usageErr([]string{"bench", "--peer", "127.0.0.1:1", "--max-errors", "-1"}, "--max-errors"),
		"status_needs_peer":        usageErr([]string{"status"}, "--peer is required"),
		"serve_bad_metrics_listen": usageErr([]string{"serve", "--metrics-listen", "nope"}, `--metrics-listen "nope"`),
		// "its plain build's rdmamgr devices exits 1"
		"devices_without_ibverbs": {args: []string{"devices"}, stdoutHas: []string{"no devices (built without ibverbs)"}},
	}
	for name, c := range cases {
		t.Run(name, c.run)
	}
}
