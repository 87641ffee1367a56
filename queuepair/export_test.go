package queuepair

// RaceEnabled tells the external tests whether -race is on.
const RaceEnabled = raceEnabled
