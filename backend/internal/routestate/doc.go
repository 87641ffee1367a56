// Package routestate is the part of a route that every backend keeps the
// same way: why the route ended (Done, Err), its counters (Stats), and the
// checks of a work request that do not depend on the transport (Validate).
//
// A backend's route embeds State, so Done, Err and Stats of backend.Route
// come from here; the backend calls SetFailed once it decides the route is over
// (and runs its own teardown when SetFailed reports it was the first), Begin
// when an operation is posted and End when it is reported. None of these
// allocate: they sit on the data path.
package routestate
