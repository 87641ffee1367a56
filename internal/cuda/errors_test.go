package cuda_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

func TestCheck(t *testing.T) {
	if err := cuda.Check("cuInit", cuda.Success); err != nil {
		t.Fatalf("Check(Success) = %v", err)
	}
	for _, c := range []struct {
		code     cuda.Result
		sentinel error
		notSupp  bool
	}{
		{cuda.ErrorOutOfMemory, cuda.ErrOutOfMemory, false},
		{cuda.ErrorInvalidValue, cuda.ErrInvalidValue, false},
		{cuda.ErrorNoDevice, cuda.ErrNoDevice, true},
		{cuda.ErrorInvalidDevice, cuda.ErrNoDevice, false},
		{cuda.ErrorAlreadyMapped, cuda.ErrAlreadyMapped, false},
		{cuda.ErrorIllegalAddress, cuda.ErrIllegalAddress, false},
		{cuda.ErrorNotSupported, rdmamgr.ErrNotSupported, true},
		{cuda.Result(12345), cuda.ErrDriver, false},
	} {
		err := cuda.Check("cuX", c.code)
		if !errors.Is(err, cuda.ErrDriver) || !errors.Is(err, c.sentinel) {
			t.Errorf("%v: %v does not match ErrDriver and %v", c.code, err, c.sentinel)
		}
		if got := errors.Is(err, rdmamgr.ErrNotSupported); got != c.notSupp {
			t.Errorf("%v: matches ErrNotSupported = %v, want %v", c.code, got, c.notSupp)
		}
		if c.code != cuda.ErrorOutOfMemory && errors.Is(err, cuda.ErrOutOfMemory) {
			t.Errorf("%v matches ErrOutOfMemory", c.code)
		}
		// Out of memory is the registry's limit sentinel (a remote caller
		// of RequestBuffer branches on it); nothing else is.
		if got := errors.Is(err, rdmamgr.ErrLimit); got != (c.code == cuda.ErrorOutOfMemory) {
			t.Errorf("%v: matches ErrLimit = %v", c.code, got)
		}
		var e *cuda.Error
		if !errors.As(err, &e) || e.Code != c.code || !strings.Contains(err.Error(), "cuX") {
			t.Errorf("%v: %v is not an *Error naming the call", c.code, err)
		}
	}
	if s := cuda.ErrorOutOfMemory.String(); s != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("String = %q", s)
	}
}
