package memreg

import (
	"errors"
	"fmt"

	"github.com/rdmamgr/rdmamgr"

	"golang.org/x/sys/unix"
)

// memfdMap makes a memfd of size bytes (a multiple of the page size) and
// maps all of it shared, read-write. The fd is close-on-exec and sealed
// against shrinking and growing (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL):
// a process the fd is later passed to can map it but cannot truncate it
// under the owner (which would turn the owner's accesses into SIGBUS) nor
// change the seals.
func memfdMap(name string, size int) (fd int, mem []byte, err error) {
	return memfdMapSeals(name, size, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
}

// memfdMapOpen is memfdMap without F_SEAL_SEAL: seals can still be added
// when the memfd is exported (sealExport).
func memfdMapOpen(name string, size int) (fd int, mem []byte, err error) {
	return memfdMapSeals(name, size, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW)
}

func memfdMapSeals(name string, size, seals int) (fd int, mem []byte, err error) {
	fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, exhausted(fmt.Errorf("memfd_create: %w", err))
	}
	if err = unix.Ftruncate(fd, int64(size)); err != nil {
		err = fmt.Errorf("ftruncate memfd to %d bytes: %w", size, err)
	} else if _, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		err = fmt.Errorf("seal memfd: %w", err)
	} else if mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		err = fmt.Errorf("mmap memfd of %d bytes: %w", size, err)
	}
	if err != nil {
		_ = unix.Close(fd)
		return -1, nil, exhausted(err)
	}
	return fd, mem, nil
}

// exhausted makes err, a failed memfd_create, ftruncate or mmap, match
// rdmamgr.ErrLimit when the host ran out (memory, address space, file
// descriptors): the sentinel of the registry's own caps, so a remote
// caller of RequestBuffer can branch on it.
func exhausted(err error) error {
	if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOSPC) {
		return fmt.Errorf("%w: %w", err, rdmamgr.ErrLimit)
	}
	return err
}

// memfdUnmap unmaps mem and closes fd, once nothing references either.
func memfdUnmap(fd int, mem []byte) {
	_ = unix.Munmap(mem)
	_ = unix.Close(fd)
}

// punchHole frees the pages of the first n bytes of memfd fd (they read as
// zeros afterwards), keeping its size.
func punchHole(fd, n int) error {
	return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, int64(n))
}
