package remoteguard

import "errors"

// ErrTooManyConns: a gRPC connection over the connection caps (it is
// closed at once).
var ErrTooManyConns = errors.New("remoteguard: too many control connections")
