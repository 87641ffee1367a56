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
--tls-ca); keep ca.key private.`,
		setup: func(fs *flag.FlagSet) runFunc {
			dir := fs.String("dir", "certs", "`directory` for ca.crt, ca.key and NAME.crt/NAME.key")
			var hosts multiFlag
			fs.Var(&hosts, "host", "`NAME[=ADDR,...]`: issue NAME.crt valid for NAME and the addresses (repeatable)")
			return func(ctx context.Context, e *env) error { return makeCerts(*dir, hosts, e.stdout) }
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

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
