package main

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"
)

// uidList is the value of --shm-allow-uid: user ids or names, comma
// separated, whose processes the shm backend serves besides the daemon's
// own (shm.Config.AllowUIDs). "" is none.
type uidList []int

func (l *uidList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, u := range *l {
		s[i] = strconv.Itoa(u)
	}
	return strings.Join(s, ",")
}

func (l *uidList) Set(v string) error {
	var uids []int
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if n, err := strconv.ParseUint(f, 10, 31); err == nil {
			uids = append(uids, int(n))
			continue
		}
		u, err := user.Lookup(f)
		if err != nil {
			return fmt.Errorf("want user ids or names, comma separated: %q: no such user", f)
		}
		n, err := strconv.ParseUint(u.Uid, 10, 31)
		if err != nil {
			return fmt.Errorf("user %q has uid %q: not a number", f, u.Uid)
		}
		uids = append(uids, int(n))
	}
	*l = uids
	return nil
}
