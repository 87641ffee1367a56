package main

import (
	"net"
	"os"
)

// sdNotify sends state ("READY=1", "STOPPING=1") to the service manager
// when it asked for notifications (systemd's Type=notify sets
// NOTIFY_SOCKET); otherwise it does nothing. A name starting with '@' is
// an abstract socket.
func sdNotify(state string) error {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil
	}
	if name[0] == '@' {
		name = "\x00" + name[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}
