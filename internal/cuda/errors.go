package cuda

import (
	"errors"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
)

// Result is a CUresult, the status every driver API call returns.
type Result int32

// The CUresult codes this package names (cuda.h's values). Any other code
// still makes an *Error, which matches no sentinel but ErrDriver.
const (
	Success                      Result = 0
	ErrorInvalidValue            Result = 1
	ErrorOutOfMemory             Result = 2
	ErrorNotInitialized          Result = 3
	ErrorDeinitialized           Result = 4
	ErrorNoDevice                Result = 100
	ErrorInvalidDevice           Result = 101
	ErrorInvalidContext          Result = 201
	ErrorMapFailed               Result = 205
	ErrorAlreadyMapped           Result = 208
	ErrorPeerAccessUnsupported   Result = 217
	ErrorInvalidHandle           Result = 400
	ErrorNotReady                Result = 600
	ErrorIllegalAddress          Result = 700
	ErrorHostMemoryRegistered    Result = 712
	ErrorHostMemoryNotRegistered Result = 713
	ErrorNotPermitted            Result = 800
	ErrorNotSupported            Result = 801
	ErrorSystemDriverMismatch    Result = 803
	ErrorUnknown                 Result = 999
)

// The sentinel errors of package cuda, one per meaning; compare with
// errors.Is. Every failed driver call is an *Error that matches ErrDriver
// and the sentinel of its code. A missing driver or device, and a call the
// device or driver cannot do, also match rdmamgr.ErrNotSupported.
var (
	// ErrDriver: any failed CUDA driver call.
	ErrDriver = errors.New("cuda: driver call failed")
	// ErrInvalidValue: CUDA_ERROR_INVALID_VALUE (a bad pointer, length or
	// flag); a copy out of an allocation's bounds is refused with it.
	ErrInvalidValue = errors.New("cuda: invalid value")
	// ErrOutOfMemory: CUDA_ERROR_OUT_OF_MEMORY, device or pinned host;
	// it also matches rdmamgr.ErrLimit.
	ErrOutOfMemory = errors.New("cuda: out of memory")
	// ErrNotInitialized: CUDA_ERROR_NOT_INITIALIZED or DEINITIALIZED.
	ErrNotInitialized = errors.New("cuda: not initialized")
	// ErrNoDevice: CUDA_ERROR_NO_DEVICE or INVALID_DEVICE (an ordinal out
	// of range).
	ErrNoDevice = errors.New("cuda: no such device")
	// ErrInvalidContext: CUDA_ERROR_INVALID_CONTEXT.
	ErrInvalidContext = errors.New("cuda: invalid context")
	// ErrInvalidHandle: CUDA_ERROR_INVALID_HANDLE (a destroyed stream, an
	// unknown IPC handle).
	ErrInvalidHandle = errors.New("cuda: invalid handle")
	// ErrAlreadyMapped: CUDA_ERROR_ALREADY_MAPPED (an IPC handle opened
	// twice in one process: open once, cache, close once).
	ErrAlreadyMapped = errors.New("cuda: already mapped")
	// ErrMapFailed: CUDA_ERROR_MAP_FAILED (an IPC handle whose memory is
	// gone).
	ErrMapFailed = errors.New("cuda: map failed")
	// ErrNotReady: CUDA_ERROR_NOT_READY. Stream.Query turns it into false;
	// it reaches callers only from calls that have no "not yet" answer.
	ErrNotReady = errors.New("cuda: not ready")
	// ErrIllegalAddress: CUDA_ERROR_ILLEGAL_ADDRESS: an asynchronous copy
	// touched memory that was freed under it.
	ErrIllegalAddress = errors.New("cuda: illegal address")
	// ErrHostRegistered: CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED or
	// NOT_REGISTERED.
	ErrHostRegistered = errors.New("cuda: host memory registration mismatch")
)

var sentinels = map[Result]error{
	ErrorInvalidValue:            ErrInvalidValue,
	ErrorOutOfMemory:             ErrOutOfMemory,
	ErrorNotInitialized:          ErrNotInitialized,
	ErrorDeinitialized:           ErrNotInitialized,
	ErrorNoDevice:                ErrNoDevice,
	ErrorInvalidDevice:           ErrNoDevice,
	ErrorInvalidContext:          ErrInvalidContext,
	ErrorMapFailed:               ErrMapFailed,
	ErrorAlreadyMapped:           ErrAlreadyMapped,
	ErrorInvalidHandle:           ErrInvalidHandle,
	ErrorNotReady:                ErrNotReady,
	ErrorIllegalAddress:          ErrIllegalAddress,
	ErrorHostMemoryRegistered:    ErrHostRegistered,
	ErrorHostMemoryNotRegistered: ErrHostRegistered,
}

// notSupported are the codes that also match rdmamgr.ErrNotSupported: the
// machine cannot do it, whatever the caller changes.
var notSupported = map[Result]bool{
	ErrorNoDevice:              true,
	ErrorNotSupported:          true,
	ErrorPeerAccessUnsupported: true,
	ErrorSystemDriverMismatch:  true,
	ErrorNotPermitted:          true,
}

var names = map[Result]string{
	Success:                      "CUDA_SUCCESS",
	ErrorInvalidValue:            "CUDA_ERROR_INVALID_VALUE",
	ErrorOutOfMemory:             "CUDA_ERROR_OUT_OF_MEMORY",
	ErrorNotInitialized:          "CUDA_ERROR_NOT_INITIALIZED",
	ErrorDeinitialized:           "CUDA_ERROR_DEINITIALIZED",
	ErrorNoDevice:                "CUDA_ERROR_NO_DEVICE",
	ErrorInvalidDevice:           "CUDA_ERROR_INVALID_DEVICE",
	ErrorInvalidContext:          "CUDA_ERROR_INVALID_CONTEXT",
	ErrorMapFailed:               "CUDA_ERROR_MAP_FAILED",
	ErrorAlreadyMapped:           "CUDA_ERROR_ALREADY_MAPPED",
	ErrorPeerAccessUnsupported:   "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
	ErrorInvalidHandle:           "CUDA_ERROR_INVALID_HANDLE",
	ErrorNotReady:                "CUDA_ERROR_NOT_READY",
	ErrorIllegalAddress:          "CUDA_ERROR_ILLEGAL_ADDRESS",
	ErrorHostMemoryRegistered:    "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	ErrorHostMemoryNotRegistered: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	ErrorNotPermitted:            "CUDA_ERROR_NOT_PERMITTED",
	ErrorNotSupported:            "CUDA_ERROR_NOT_SUPPORTED",
	ErrorSystemDriverMismatch:    "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	ErrorUnknown:                 "CUDA_ERROR_UNKNOWN",
}

// String returns the code's cuda.h name.
func (r Result) String() string {
	if n, ok := names[r]; ok {
		return n
	}
	return fmt.Sprintf("CUresult(%d)", int32(r))
}

// Error is a failed driver call: the call's name (cuMemAlloc) and its
// code. It matches ErrDriver, the code's sentinel,
// rdmamgr.ErrNotSupported for the codes that mean the machine cannot, and
// rdmamgr.ErrLimit for out of memory (device or pinned host), the
// sentinel of every memory cap of the registry.
type Error struct {
	Call string
	Code Result
}

func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %v (%d)", e.Call, e.Code, int32(e.Code))
}

// Unwrap gives the sentinels errors.Is matches.
func (e *Error) Unwrap() []error {
	errs := []error{ErrDriver}
	if s, ok := sentinels[e.Code]; ok {
		errs = append(errs, s)
	}
	if notSupported[e.Code] {
		errs = append(errs, rdmamgr.ErrNotSupported)
	}
	if e.Code == ErrorOutOfMemory { // as the registry's own caps: callers branch on it
		errs = append(errs, rdmamgr.ErrLimit)
	}
	return errs
}

// Check returns nil for Success and an *Error naming call otherwise. Both
// the real driver and the stand-in report through it, so their errors
// compare alike.
func Check(call string, r Result) error {
	if r == Success {
		return nil
	}
	return &Error{Call: call, Code: r}
}

// NotSupported returns an error matching rdmamgr.ErrNotSupported that
// names why (the driver library missing, a symbol it lacks, no device).
func NotSupported(format string, args ...any) error {
	return fmt.Errorf("cuda: %s: %w", fmt.Sprintf(format, args...), rdmamgr.ErrNotSupported)
}
