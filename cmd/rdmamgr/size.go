package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/size"
)

// The command line's sizes (internal/size): --size 1MiB, --max-registered
// 64GiB; parseSize refuses the ambiguous 1M.

func parseSize(s string) (uint64, error) { return size.Parse(s) }

func fmtSize(n uint64) string { return size.Exact(n) }

func fmtBytes(n uint64) string { return size.Human(n) }

// sizeInt is an int flag that takes a size (--max-message-size 4MiB, or
// bytes).
type sizeInt struct {
	p   *int
	max uint64
}

func (s sizeInt) String() string {
	if s.p == nil {
		return ""
	}
	return fmtSize(uint64(*s.p))
}

func (s sizeInt) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	if n == 0 || n > s.max {
		return fmt.Errorf("want a size from 1B to %s", fmtSize(s.max))
	}
	*s.p = int(n)
	return nil
}

// secondsDuration is a duration flag that also takes a bare number of
// seconds (status --watch 2).
type secondsDuration struct{ flag.Value }

func (d secondsDuration) Set(v string) error {
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		v += "s"
	}
	if err := d.Value.Set(v); err != nil {
		return errors.New("want a duration such as 500ms, 10s or 1m30s (a bare number is seconds)")
	}
	return nil
}

// secondsDurations makes every duration flag of fs a secondsDuration.
func secondsDurations(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, ok := g.Get().(time.Duration); ok {
				f.Value = secondsDuration{f.Value}
			}
		}
	})
}
