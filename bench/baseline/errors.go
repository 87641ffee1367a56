package baseline

import (
	"errors"
	"fmt"
)

// ErrWrongBackend: a measurement of ours went over a route of another kind
// than Config.WantBackend (a same-host bench that fell back to TCP measures
// the wrong thing). It ends the run.
var ErrWrongBackend = errors.New("baseline: the route is not of the backend asked for")

// ErrConfig marks a run that cannot be set up as asked (a placement this
// machine cannot give): the command line's mistake, not the run's. Errors
// that match it read as the reason alone.
var ErrConfig = configError{"baseline: cannot run as configured"}

type configError struct{ msg string }

func (e configError) Error() string { return e.msg }

func (e configError) Is(target error) bool { return target == ErrConfig }

func configErrorf(format string, a ...any) error { return configError{fmt.Sprintf(format, a...)} }
