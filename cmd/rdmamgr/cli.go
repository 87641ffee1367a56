package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/peterbourgon/ff/v3"
)

// The command line: subcommands with their own flag sets, parsed by ff
// (flags, then RDMAMGR_* environment variables). Each command's setup
// registers its flags (one line per flag) and returns the function that runs
// once they are parsed; dispatch owns help, usage errors, exit codes and
// signals, so that every command behaves the same.

// envPrefix prefixes the environment variable of every flag:
// --max-registered is also RDMAMGR_MAX_REGISTERED.
const envPrefix = "RDMAMGR"

// command is one subcommand.
type command struct {
	name     string
	synopsis string // after "rdmamgr NAME "
	short    string // one line for the command list
	long     string // paragraph for "rdmamgr help NAME"
	// setup registers the command's flags on fs and returns what runs once
	// they are parsed.
	setup func(fs *flag.FlagSet) runFunc
	// interruptOK: ending on SIGINT/SIGTERM is the normal way out (serve).
	interruptOK bool
}

// runFunc runs a command whose flags are parsed.
type runFunc func(ctx context.Context, e *env) error

// env is what a command writes to.
type env struct {
	stdout, stderr io.Writer
	// tty reports whether stdout is a terminal (progress lines).
	tty bool
}

func commands() []*command {
	return []*command{serveCommand(), demoCommand(), benchCommand(), baselineServerCommand(), statusCommand(), devicesCommand(),
		certsCommand(), membersCommand(), versionCommand()}
}

func findCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// Exit statuses.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130 // 128 + SIGINT
	exitTerminated  = 143 // 128 + SIGTERM
)

// usageError is a mistake on the command line: exit 2, one line and a hint.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// refusalError is a daemon that cannot do what its flags say (a
// non-loopback --listen without TLS): exit 2 and one line, no hint, so that
// a service manager's log shows the reason alone.
type refusalError struct{ error }

func (e refusalError) Unwrap() error { return e.error }

func refusef(format string, a ...any) error { return refusalError{fmt.Errorf(format, a...)} }

// errInterrupted ends a command that a signal stopped after it reported
// what it had.
var errInterrupted = errors.New("interrupted")

// signalCause is the cause of a context a signal ended.
type signalCause struct{ sig os.Signal }

func (s signalCause) Error() string { return "interrupted (" + s.sig.String() + ")" }

// run runs the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigc)
	go func() {
		select {
		case s := <-sigc:
			cancel(signalCause{s})
		case <-ctx.Done():
		}
	}()
	return runCtx(ctx, args, &env{stdout: stdout, stderr: stderr, tty: isTerminal(stdout)})
}

// runCtx is run with the process's signals already turned into ctx's
// cancellation (cause signalCause).
func runCtx(ctx context.Context, args []string, e *env) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, mainUsage())
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		return help(rest, e)
	case "--version", "-version":
		name = "version"
	}
	c := findCommand(name)
	if c == nil {
		fmt.Fprintf(e.stderr, "rdmamgr: unknown command %q\nRun 'rdmamgr help' for the commands.\n", name)
		return exitUsage
	}
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are printed here, once
	fs.Usage = func() {}
	runner := c.setup(fs)
	yesNoBools(fs)
	secondsDurations(fs)
	err := ff.Parse(fs, rest, ff.WithEnvVarPrefix(envPrefix))
	if err == nil {
		emptyEnv(fs)
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(e.stdout, commandHelp(c))
		return exitOK
	case err != nil:
		err = usageError{flagError(fs, err)}
	case fs.NArg() > 0:
		err = usagef("unexpected argument %q", fs.Arg(0))
	default:
		err = runner(ctx, e)
	}
	return exitStatus(ctx, c.name, c.interruptOK, err, e)
}

// exitStatus prints err (if any) and maps it, and how the run ended, to the
// exit status.
func exitStatus(ctx context.Context, name string, interruptOK bool, err error, e *env) int {
	var sc signalCause
	signalled := errors.As(context.Cause(ctx), &sc)
	var ue usageError
	var re refusalError
	switch {
	case errors.As(err, &re):
		fmt.Fprintf(e.stderr, "rdmamgr %s: %v\n", name, re.error)
		return exitUsage
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "rdmamgr %s: %v\nRun 'rdmamgr help %s' for usage.\n", name, ue.error, strings.Fields(name)[0])
		return exitUsage
	case signalled && interruptOK && err == nil:
		return exitOK
	case signalled:
		fmt.Fprintf(e.stderr, "rdmamgr %s: interrupted\n", name)
		if sc.sig == syscall.SIGTERM {
			return exitTerminated
		}
		return exitInterrupted
	case err != nil:
		fmt.Fprintf(e.stderr, "rdmamgr %s: %v\n", name, err)
		return exitFailure
	}
	return exitOK
}

// emptyEnv applies the RDMAMGR_* variables that are set but empty, which
// ff skips: an empty variable sets its flag to "" where "" means something
// (--metrics-listen: off; a size: the default; --shm-allow-uid: none), and
// is ignored for a flag that takes a number, duration or boolean. A flag on
// the command line still wins.
func emptyEnv(fs *flag.FlagSet) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok && v == "" {
			old := f.Value.String()
			if fs.Set(f.Name, "") != nil {
				_ = fs.Set(f.Name, old) // a number's Set stores 0 as it fails
			}
		}
	})
}

// yesNoBool is a boolean flag that also takes yes/no and on/off, as
// environment files spell them (RDMAMGR_DATA_TLS=yes).
type yesNoBool struct{ flag.Value }

func (b yesNoBool) IsBoolFlag() bool { return true }

func (b yesNoBool) Set(s string) error {
	switch strings.ToLower(s) {
	case "yes", "on", "y":
		s = "true"
	case "no", "off", "n":
		s = "false"
	}
	if err := b.Value.Set(s); err != nil {
		return errors.New("want true or false (or yes/no, on/off)")
	}
	return nil
}

// yesNoBools makes every boolean flag of fs a yesNoBool.
func yesNoBools(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			f.Value = yesNoBool{f.Value}
		}
	})
}

// envName is the environment variable of flag name.
func envName(name string) string {
	return envPrefix + "_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_", "/", "_").Replace(name))
}

// flagError rewrites the flag package's and ff's parse errors in our
// spelling (--name, not -name).
func flagError(fs *flag.FlagSet, err error) error {
	msg := strings.TrimPrefix(err.Error(), "error parsing commandline arguments: ")
	if env, ok := strings.CutPrefix(msg, "error parsing environment variables: error setting flag "); ok {
		// "count" from environment variable "RDMAMGR_COUNT": parse error
		_, tail, _ := strings.Cut(env, " from environment variable ")
		return errors.New(strings.ReplaceAll(tail, `"`, ""))
	}
	if n, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		return fmt.Errorf("unknown flag %s", dashdash(n))
	}
	if n, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return fmt.Errorf("flag %s needs a value", dashdash(n))
	}
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		// invalid value "abc" for flag -count: parse error
		val, tail, _ := strings.Cut(rest, " for flag ")
		name, why, _ := strings.Cut(tail, ": ")
		return fmt.Errorf("%s %s: %s", dashdash(name), val, valueWant(fs.Lookup(strings.TrimLeft(name, "-")), why))
	}
	if rest, ok := strings.CutPrefix(msg, "invalid boolean value "); ok {
		val, tail, _ := strings.Cut(rest, " for ")
		return fmt.Errorf("%s %s: want true or false", dashdash(tail), val)
	}
	return err
}

// valueWant says what a flag wants instead of the flag package's "parse
// error".
func valueWant(f *flag.Flag, why string) string {
	if f == nil || (why != "parse error" && why != "value out of range") {
		return why
	}
	switch typ, _ := flag.UnquoteUsage(f); typ {
	case "int":
		return "want a whole number"
	case "duration":
		return "want a duration such as 500ms, 10s or 1m30s"
	case "":
		return "want true or false"
	}
	return why
}

func dashdash(name string) string { return "--" + strings.TrimLeft(name, "-") }

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
