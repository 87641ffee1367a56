package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/rdmamgr/rdmamgr/certs"
)

func certsCommand() *command {
	return &command{
		name:     "certs",
		synopsis: "--dir D --host NAME[=ADDR,...] ...",
		short:    "make a deployment CA and host certificates",
		long: `Makes a deployment CA (unless --dir has one) and a certificate and key per
--host NAME[=ADDR,ADDR...], as 'cockroach cert' and 'consul tls' do for a quick
start. Give each host its NAME.crt, NAME.key and ca.crt (--tls-cert, --tls-key,
--tls-ca); keep ca.key private. Keys are written mode 0600. certs refuses a
--dir inside a Go package directory or a git work tree (keys do not belong in
a repository) unless given --force.`,
		setup: func(fs *flag.FlagSet) runFunc {
			dir := fs.String("dir", "", "`directory` for ca.crt, ca.key and NAME.crt/NAME.key (required; not in a repository)")
			force := fs.Bool("force", false, "write into --dir even inside a Go package directory or a git work tree")
			var hosts multiFlag
			fs.Var(&hosts, "host", "`NAME[=ADDR,...]`: issue NAME.crt valid for NAME and the addresses (repeatable)")
			return func(ctx context.Context, e *env) error {
				if *dir == "" {
					return usagef("--dir is required")
				}
				if !*force {
					if why := inRepository(*dir); why != "" {
						return usagef("--dir %s is %s: keys do not belong there (give a directory outside, or --force)", *dir, why)
					}
				}
				return makeCerts(*dir, hosts, e.stdout)
			}
		},
	}
}

// makeCerts makes the CA (unless dir has one) and the host certificates.
func makeCerts(dir string, hosts []string, stdout io.Writer) error {
	ca, err := certs.LoadCA(dir)
	if err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, certs.CACertFile)); statErr == nil {
			return err // a CA that does not load is not replaced
		}
		if ca, err = certs.NewCA("rdmamgr deployment CA"); err != nil {
			return err
		}
		if err := ca.Save(dir); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "CA %s (keep %s private: it makes members)\n",
			filepath.Join(dir, certs.CACertFile), filepath.Join(dir, certs.CAKeyFile))
	}
	for _, h := range hosts {
		name, addrs, _ := strings.Cut(h, "=")
		if name == "" || strings.ContainsAny(name, "/\\") {
			return usagef("--host %q: want NAME[=ADDR,...]", h)
		}
		sans := []string{name}
		if addrs != "" {
			sans = append(sans, strings.Split(addrs, ",")...)
		}
		c, k, err := ca.IssueFiles(dir, name, sans)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "host %s: %s %s for %s\n", name, c, k, strings.Join(sans, ","))
	}
	return nil
}

// inRepository says why dir (or, where it does not exist yet, its nearest
// existing parent) is no place for keys: a Go package directory, or inside
// a git work tree; "" where it is neither.
func inRepository(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	d := abs
	for {
		if _, err := os.Stat(d); err == nil {
			break
		}
		parent := filepath.Dir(d)
		if parent == d {
			return ""
		}
		d = parent
	}
	if gofiles, _ := filepath.Glob(filepath.Join(d, "*.go")); len(gofiles) > 0 {
		return "a Go package directory"
	}
	for p := d; ; {
		if _, err := os.Lstat(filepath.Join(p, ".git")); err == nil {
			return "inside the git work tree " + p
		}
		parent := filepath.Dir(p)
		if parent == p {
			return ""
		}
		p = parent
	}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
