package tcp

// RaceEnabled tells the external tests whether the race detector is on.
const RaceEnabled = raceEnabled

// TLSCreds is tlsCreds, for the external tests.
var TLSCreds = tlsCreds
