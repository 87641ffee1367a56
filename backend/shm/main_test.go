//go:build linux

package shm_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// ownerEnv makes the test binary an owner process (runOwner) instead of
// running the tests.
const ownerEnv = "RDMAMGR_SHM_TEST_OWNER"

func TestMain(m *testing.M) {
	if os.Getenv(ownerEnv) != "" {
		if err := runOwner(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "owner:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// ownerID is the manager id of an owner process.
const ownerID = 0xD1E

// ownerSize is the size of the owner process's buffer.
const ownerSize = 16 << 20

// runOwner is an owner process: an shm backend with one 16 MiB buffer
// filled with 0x5A. It reads a route's info (hex, one line), answers it
// (hex) with the buffer's region id and key, then serves until stdin
// ends.
func runOwner(in io.Reader, out io.Writer) error {
	reg := memreg.NewRegistry(ownerID, buffer.Limits{})
	b, err := shm.New(shm.Config{}, reg, nil)
	if err != nil {
		return err
	}
	if err := b.Start(context.Background()); err != nil {
		return err
	}
	defer b.Close()
	h, err := reg.Allocate(ownerSize, buffer.AccessReadWrite)
	if err != nil {
		return err
	}
	mem, err := reg.Bytes(h)
	if err != nil {
		return err
	}
	for i := range mem {
		mem[i] = 0x5A
	}
	r := bufio.NewReader(in)
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	info, err := hex.DecodeString(line[:len(line)-1])
	if err != nil {
		return err
	}
	ans, err := b.AcceptRoute(context.Background(), 0xA, info)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%x %d %x\n", ans, h.Region, h.Key[:])
	_, err = io.Copy(io.Discard, r)
	return err
}
