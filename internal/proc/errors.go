package proc

import "errors"

// ErrNoAffinity: CPU placement is not available on this platform.
var ErrNoAffinity = errors.New("CPU placement needs Linux; use --placement any")
