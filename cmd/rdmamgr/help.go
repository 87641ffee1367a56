package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/ibverbs"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// mainUsage lists the commands.
func mainUsage() string {
	var b strings.Builder
	b.WriteString("rdmamgr: an RDMA resource manager\n\nusage:\n")
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(w, "  rdmamgr %s\t%s\n", c.name, c.short)
	}
	w.Flush()
	b.WriteString("\nRun 'rdmamgr help CMD' for a command's flags. Every flag can also be set\n" +
		"in the environment: --max-registered as RDMAMGR_MAX_REGISTERED.\n" +
		"Exit status: 0 success, 1 failure, 2 usage error, 130 interrupted.\n")
	return b.String()
}

// help serves "rdmamgr help [CMD]".
func help(args []string, e *env) int {
	switch len(args) {
	case 0:
		fmt.Fprint(e.stdout, mainUsage())
		return exitOK
	case 1:
		if c := findCommand(args[0]); c != nil {
			fmt.Fprint(e.stdout, commandHelp(c))
			return exitOK
		}
		fmt.Fprintf(e.stderr, "rdmamgr help: unknown command %q\nRun 'rdmamgr help' for the commands.\n", args[0])
	default:
		fmt.Fprintf(e.stderr, "rdmamgr help: unexpected argument %q\nRun 'rdmamgr help' for the commands.\n", args[1])
	}
	return exitUsage
}

// commandHelp is a command's synopsis, description and flags with their
// defaults and environment variables.
func commandHelp(c *command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: rdmamgr %s %s\n\n", c.name, strings.TrimSpace(c.synopsis))
	desc := c.long
	if desc == "" {
		desc = c.short
	}
	fmt.Fprintf(&b, "%s\n", strings.TrimSpace(desc))
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	c.setup(fs)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return b.String()
	}
	b.WriteString("\nflags:\n")
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		if typ != "" {
			typ = " " + typ
		}
		fmt.Fprintf(&b, "  --%s%s\n", f.Name, typ)
		fmt.Fprintf(&b, "        %s", usage)
		if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "0s" {
			fmt.Fprintf(&b, " (default %s)", def)
		}
		fmt.Fprintf(&b, " [$%s_%s]\n", envPrefix, strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")))
	})
	return b.String()
}

func versionCommand() *command {
	return &command{
		name: "version", synopsis: "", short: "print the version and build information",
		setup: func(fs *flag.FlagSet) runFunc {
			return func(_ context.Context, e *env) error {
				printVersion(e.stdout)
				return nil
			}
		},
	}
}

func printVersion(w io.Writer) {
	fmt.Fprintf(w, "rdmamgr %s\n", actor.Version())
	fmt.Fprintf(w, "backends %s\n", builtBackends())
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintf(w, "go %s\n", runtime.Version())
		return
	}
	fmt.Fprintf(w, "module %s\ngo %s %s/%s\n", bi.Main.Path, bi.GoVersion, runtime.GOOS, runtime.GOARCH)
	rev := "unknown (built outside a git checkout, or with -buildvcs=false)"
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				defer fmt.Fprintln(w, "vcs.modified true (uncommitted changes)")
			}
		case "-tags", "CGO_ENABLED", "vcs.time":
			fmt.Fprintf(w, "%s %s\n", s.Key, s.Value)
		}
	}
	fmt.Fprintf(w, "revision %s\n", rev)
}

// builtBackends lists the data planes compiled into this binary (TCP
// always; shm on Linux; ibverbs with -tags ibverbs).
func builtBackends() string {
	b := []string{string(backend.KindTCP)}
	if _, err := wiring.NewBackend[*shm.Backend](shm.Config{}, nil, nil); !errors.Is(err, shm.ErrNotBuilt) {
		b = append(b, string(backend.KindSHM))
	}
	if _, err := ibverbs.Devices(); !errors.Is(err, ibverbs.ErrNotBuilt) {
		b = append(b, string(backend.KindIBVerbs))
	}
	return strings.Join(b, " ")
}
