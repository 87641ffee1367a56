package leakcheck

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
)

// Snapshot is the goroutines of this process at one moment, grouped by
// their top function and the function that created them.
type Snapshot struct {
	total  int
	groups map[string]*group
}

type group struct {
	n       int
	example string // one stack of the group
}

// Take lists the goroutines of this process, the caller's included.
func Take() *Snapshot {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	s := &Snapshot{groups: make(map[string]*group)}
	for _, g := range strings.Split(string(buf), "\n\n") {
		key := groupKey(g)
		gr := s.groups[key]
		if gr == nil {
			gr = &group{example: g}
			s.groups[key] = gr
		}
		gr.n++
		s.total++
	}
	return s
}

// groupKey is a stack's top function and creator, without arguments and
// goroutine numbers.
func groupKey(stack string) string {
	lines := strings.Split(stack, "\n")
	top, creator := "", ""
	if len(lines) > 1 {
		top = lines[1]
	}
	for _, l := range lines {
		if c, ok := strings.CutPrefix(l, "created by "); ok {
			creator = c
		}
	}
	// "f(0x1, 0x2)" -> "f"; "g in goroutine 7" -> "g"
	if i := strings.LastIndexByte(top, '('); i > 0 {
		top = top[:i]
	}
	if i := strings.Index(creator, " in goroutine "); i > 0 {
		creator = creator[:i]
	}
	return top + " (created by " + creator + ")"
}

// Total is the number of goroutines in s.
func (s *Snapshot) Total() int { return s.total }

// Growth lists the groups that have more goroutines in s than in before,
// each with its counts and an example stack ("" when none grew).
func (s *Snapshot) Growth(before *Snapshot) string {
	var keys []string
	for k, g := range s.groups {
		if b := before.groups[k]; b == nil || g.n > b.n {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		was := 0
		if g := before.groups[k]; g != nil {
			was = g.n
		}
		fmt.Fprintf(&b, "%d -> %d: %s\n%s\n\n", was, s.groups[k].n, k, s.groups[k].example)
	}
	return b.String()
}
